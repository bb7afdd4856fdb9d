"""The shipped playbook ("Standard", `standard.yaml`): what a new installation publishes first, and what a
model asked without a playbook follows."""

from functools import cache
from pathlib import Path

from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.spec import PlaybookSpec, spec_validate

STANDARD_FILE = Path(__file__).with_name("standard.yaml")


@cache
def standard_spec() -> PlaybookSpec:
    return spec_validate(spec_from_file(STANDARD_FILE))
