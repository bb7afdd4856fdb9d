"""The shipped playbook ("Standard", `standard.yaml`): what a new installation publishes first, and what a
model asked without a playbook follows."""

from functools import cache

from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.spec import STANDARD_FILE, PlaybookSpec, spec_validate


@cache
def standard_spec() -> PlaybookSpec:
    return spec_validate(spec_from_file(STANDARD_FILE))
