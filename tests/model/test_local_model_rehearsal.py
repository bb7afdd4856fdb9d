"""A rehearsal of the example file on the real local model (SmolLM2-135M on llama-server), through a real worker.

It asserts the protocol, not the model's judgement: every item ends -- rehearsed
to a decision, or failed with a classified reason naming its step -- and nothing
reaches the helpdesk. The agreement with the file's expected labels is printed
(pytest -s) and recorded in docs/model-endpoints.md, never asserted.

The suite rehearses the first LOCAL_REHEARSAL_TICKETS tickets of the file (2: a
135M model on 2 cores takes 10-20 s a ticket, more beside the rest of the suite); `LOCAL_REHEARSAL_TICKETS=all`
rehearses the whole file (72 tickets):
    TEST_PROCESSES=1 LOCAL_REHEARSAL_TICKETS=all make test PYTEST_ARGS="tests/model/test_local_model_rehearsal.py -s"
"""

import csv
import io
import os
from pathlib import Path

import pytest

from ledger.models import Effect
from ticketagent.models import ItemStatus
from ticketagent.playbooks.files import spec_from_file
from ticketagent.playbooks.services import playbook_import
from ticketagent.services.upload import task_upload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
TICKETS = os.environ.get("LOCAL_REHEARSAL_TICKETS", "2")


def example_file() -> bytes:
    """The example rehearsal file, or its first TICKETS rows."""
    data = (EXAMPLES / "rehearsal-acme.csv").read_text(encoding="utf-8")
    if TICKETS == "all":
        return data.encode()
    rows = list(csv.reader(io.StringIO(data)))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows[: int(TICKETS) + 1])
    return out.getvalue().encode()


def agreement(items) -> dict[str, tuple[int, int]]:
    """Per label: (agreed, of how many) between the file's expected labels and the rehearsed decisions."""
    found = {"category": [0, 0], "priority": [0, 0], "actions": [0, 0]}
    for item in items:
        outputs = item.checkpoint.step_outputs if hasattr(item, "checkpoint") else {}
        if "decide" not in outputs:
            continue
        got = {"category": outputs["triage"]["category"], "priority": outputs["triage"]["priority"],
               "actions": sorted(outputs["decide"]["actions"])}
        for label, expected in item.expected.items():
            found[label][1] += 1
            found[label][0] += (sorted(expected) if label == "actions" else expected) == got[label]
    return {label: (agreed, total) for label, (agreed, total) in found.items()}


def test_a_rehearsal_of_the_example_file_runs_end_to_end_on_the_local_model(local_model, workers, sandbox):
    version = playbook_import(data=spec_from_file(EXAMPLES / "playbook-acme.yaml"), publish=True)
    task = task_upload(data=example_file(), filename="rehearsal-acme.csv", playbook_version=version,
                       rehearsal=True, failure_threshold=1000)
    assert workers.burst(timeout=7200 if TICKETS == "all" else 1800, extra_env=local_model.env) == 0, workers.logs()
    items = list(task.items.select_related("checkpoint").order_by("row"))
    rehearsed = [i for i in items if i.status == ItemStatus.DONE]
    failed = [i for i in items if i.status == ItemStatus.FAILED]
    assert len(rehearsed) + len(failed) == len(items), [(i.ticket_id, i.status, i.last_error) for i in items]
    print("\n".join(f"  {i.ticket_id}: {i.last_error}" for i in failed))
    for item in failed:  # a classified reason naming the step, as on every model
        assert item.failure_kind and item.last_error.split(":")[0] in ("triage", "draft", "decide"), item.last_error
    assert sandbox.counts()["deliveries"] == 0 and not Effect.objects.filter(owner_task=str(task.pk)).exists()
    held = sum(1 for i in rehearsed if i.checkpoint.step_outputs["decide"].get("held"))
    checks = sum(1 for i in rehearsed if i.checkpoint.step_outputs["decide"].get("checks"))
    print(f"\n  local model rehearsal of {len(items)} tickets: {len(rehearsed)} rehearsed, {len(failed)} failed; "
          f"{held} with actions held for approval, {checks} drafts failing a reply check")
    for label, (agreed, total) in agreement(rehearsed).items():
        print(f"  agreement on {label}: {agreed} of {total}")
