"""A worker with a deliberately wrong gate, for the kill test's self-test.

    python -m tests.killtest.broken_worker no-intent|commit-before-call|unchecked-lease

The same as `manage.py worker`, with the pipeline's gate (`intent_record`,
`effect_call`, no chained intents) swapped for one of the gates in
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

    from tests.killtest.broken_gates import GATES
    from ticketagent.pipeline import run, steps

    gate = GATES[args.gate]

    def broken_call(intent, effect, blocked="", **kwargs):
        return gate(action=intent.spec.name, payload=intent.payload, owner_task=intent.owner_task,
                    owner_item=intent.owner_item, owner_step=intent.owner_step, lease_token=intent.lease_token)

    # every effect through the broken gate: no intent chained with a recovery
    # point, phase 1 left to the broken gate, the call and its record too
    steps.chain_intent = run.chain_intent = lambda *args, **kwargs: None
    steps.intent_record = lambda intent, fence=None: (None, "")
    if args.gate == "unchecked-lease":  # its phase 1 too: the intent row is the broken gate's own
        steps.intent_commit = lambda intent, fence=None: (None, "")
    steps.effect_call = broken_call
    call_command("worker")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
