"""A worker with a deliberately wrong gate, for the kill test's self-test.

    python -m tests.killtest.broken_worker no-intent|commit-before-call|unchecked-lease

The same as `manage.py worker`, with the pipeline's effect step (intent,
call, outcome) swapped for one of the gates in
tests/killtest/broken_gates.py: the harness must report the failure. The
product carries no such gate.
"""

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.killtest.broken_worker")
    parser.add_argument("gate", choices=["no-intent", "commit-before-call", "unchecked-lease"])
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from ledger.models import EffectState
    from tests.killtest.broken_gates import GATES
    from ticketagent.models import EventType, ItemStatus
    from ticketagent.pipeline import run, steps
    from ticketagent.pipeline.phases import phase_fail, phase_step_done, phase_wait

    gate = GATES[args.gate]

    def broken_step(step, item_run, task):
        """The effect step through the broken gate; how the item ended ("": it goes on)."""
        authorized = steps.AUTO_CLOSE if step == "close_ticket" else ""
        intent = steps._intent(item_run, task, step, authorized)
        result = gate(action=intent.spec.name, payload=intent.payload, owner_task=intent.owner_task,
                      owner_item=intent.owner_item, owner_step=intent.owner_step, claim_token=intent.claim_token)
        if result.state == EffectState.FAILED:
            return phase_fail(item_run, kind="helpdesk_refused", message=f"{step}: {result.effect.last_error}")
        if result.state not in (EffectState.COMMITTED, EffectState.SKIPPED):
            return phase_wait(item_run, status=ItemStatus.WAITING_REVIEW, event_type=EventType.ITEM_WAITING,
                              reason=f"{step}: outcome unknown")
        return phase_step_done(item_run, step, steps._effect_summary(result.effect))

    run.run_effect_step = broken_step
    call_command("worker", sweep=False)  # beside the kill test's `recover --loop`, as its workers
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
