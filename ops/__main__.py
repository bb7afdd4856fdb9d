"""`python -m ops COMMAND …`: the operator's tools (killtest, bench) as Django commands, on `ops.settings`."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ops.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["python -m ops", *sys.argv[1:]])


if __name__ == "__main__":
    main()
