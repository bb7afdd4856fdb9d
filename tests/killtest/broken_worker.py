"""A worker with a deliberately wrong gate, for the kill test's self-test.

    python -m tests.killtest.broken_worker no-intent|commit-before-call

The same as `manage.py worker`, with the pipeline's `effect_run` swapped for
one of the gates in tests/killtest/broken_gates.py: the harness must report
the failure. The product carries no such gate.
"""

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.killtest.broken_worker")
    parser.add_argument("gate", choices=["no-intent", "commit-before-call"])
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from tests.killtest.broken_gates import GATES
    from ticketagent.pipeline import steps

    steps.effect_run = GATES[args.gate]
    call_command("worker")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
