"""A worker process for the kill test: `python -m ticketagent.killtest_worker`.

The same as `manage.py worker`; with `--broken-gate` it swaps in a
deliberately wrong gate (the kill test's self-test: the harness must be
able to fail).
"""

import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broken-gate", choices=["no-intent", "commit-before-call"], default="")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
    import django

    django.setup()
    if args.broken_gate:
        from ticketagent import broken_gates, services

        services.effect_run = broken_gates.GATES[args.broken_gate]
    from django.core.management import call_command

    call_command("worker")
    sys.exit(0)


if __name__ == "__main__":
    main()
