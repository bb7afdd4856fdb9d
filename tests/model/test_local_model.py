"""A batch on the real local model (SmolLM2-135M on llama-server), through real rq workers and the sandbox helpdesk.

The test asserts the protocol, not the model's judgement: every item ends with
a schema-valid decision or fails with a classified reason naming its step;
effects come only from the allow-list, on the item's own ticket and to the
uploaded recipient, each once however often the decision repeats it; the
ledger equals what the sandbox received; a task
suspended by model failures resumes on the model. What the model got right
is printed (pytest -s) and recorded in docs/model-endpoints.md.
"""

import csv
import io
import time
from collections import Counter

import pytest

from ledger.models import Effect, EffectState
from ticketagent.llm.base import ModelError
from ticketagent.llm.schemas import ALLOWED_ACTIONS, Decision, Reply, Triage
from ticketagent.models import Checkpoint, Event, EventType, ItemStatus, TaskStatus
from ticketagent.services.resume import task_dry_run, task_resume
from ticketagent.services.upload import task_upload

from ..conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# (ticket id, customer, subject, body, the category a person would pick)
TICKETS = [
    ("LM-1", "ana@example.com", "Charged twice", "My card was charged twice for invoice 1043. Please refund one.",
     "billing"),
    ("LM-2", "ben@example.org", "Cannot log in", "I reset my password but the login page still says it is wrong.",
     "account"),
    ("LM-3", "chen@example.net", "App crashes", "The app crashes with an error every time I open the reports tab.",
     "technical"),
    ("LM-4", "dora@example.com", "Where is my parcel?", "My package has not been delivered; tracking shows nothing.",
     "shipping"),
    ("LM-5", "eli@example.org", "Thank you", "Great support last week, thank you! You can close this ticket.",
     "feedback"),
]
LEDGER_ACTIONS = set(ALLOWED_ACTIONS) | {"notify_customer_email"}
MODEL_STEPS = ("triage", "draft", "decide")
FINAL = {ItemStatus.DONE, ItemStatus.FAILED, ItemStatus.WAITING_APPROVAL}


def upload(failure_threshold: int):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ticket_id", "customer_email", "customer_name", "subject", "body", "priority"])
    for ticket_id, email, subject, body, _ in TICKETS:
        writer.writerow([ticket_id, email, "Customer", subject, body, "normal"])
    return task_upload(data=out.getvalue().encode(), filename="local-model.csv", failure_threshold=failure_threshold)


def assert_protocol(task, sandbox) -> dict:
    """Each item: a valid decision or a classified failure; effects contained; ledger == sandbox."""
    items = {item.ref: item for item in task.items.all()}
    outcome = {}
    for item in items.values():
        checkpoint = Checkpoint.objects.filter(item=item).first()
        outputs = checkpoint.step_outputs if checkpoint else {}
        if "triage" in outputs:  # what was kept is schema-valid: the model's answers, and what code added
            Triage.model_validate(outputs["triage"])
        if "draft" in outputs:
            Reply.model_validate({k: outputs["draft"][k] for k in ("subject", "body")})
        if "decide" in outputs:
            Decision.model_validate({k: outputs["decide"][k] for k in ("status", "reason")}
                                    | {"actions": outputs["decide"]["chosen"]})
            assert set(outputs["decide"]["actions"]) <= set(ALLOWED_ACTIONS)
        if item.status == ItemStatus.FAILED:
            assert item.failure_kind in ModelError.KINDS, (item.ticket_id, item.failure_kind, item.last_error)
            assert item.last_error.split(":")[0] in MODEL_STEPS, item.last_error
        elif task.status != TaskStatus.SUSPENDED:
            assert item.status in FINAL, (item.ticket_id, item.status, item.last_error)
        if item.status in (ItemStatus.DONE, ItemStatus.WAITING_APPROVAL):
            assert "decide" in outputs, item.ticket_id
        outcome[item.ticket_id] = (item.status, item.failure_kind, outputs)
    effects = list(Effect.objects.filter(owner_task=str(task.pk)))
    for effect in effects:
        item = items[effect.owner_item]
        assert effect.action in LEDGER_ACTIONS, effect.action
        assert effect.payload["ticket"] == item.ticket_id, (effect.action, effect.payload)
        if effect.owner_step == "notify_customer":
            assert effect.payload["body"]["to"] == item.customer_email
        decided = outcome[item.ticket_id][2].get("decide", {}).get("actions", [])
        assert effect.owner_step in decided, f"{effect.owner_step} was not in the decision {decided}"
    # a decision that repeats an action (this model writes ["notify_customer", "notify_customer"]) acts once
    steps = Counter((e.owner_item, e.owner_step) for e in effects)
    assert max(steps.values(), default=1) == 1, steps
    committed = {e.idempotency_key for e in effects if e.state == EffectState.COMMITTED}
    deliveries = sandbox.deliveries()
    assert {d["key"] for d in deliveries} == committed, "the sandbox received exactly what the ledger committed"
    assert len(deliveries) == len(committed) and sandbox.counts()["duplicates"] == 0
    emails = {item.ticket_id: item.customer_email for item in items.values()}
    for d in deliveries:
        assert d["ticket"] in emails, d
        if d["endpoint"] == "notify":
            assert d["payload"]["to"] == emails[d["ticket"]], "only the uploaded recipient"
    return outcome


def report(outcome: dict, seconds: float) -> None:
    """What the model got right, for docs/model-endpoints.md (visible with pytest -s)."""
    right = 0
    for ticket_id, _, _, _, expected in TICKETS:
        status, kind, outputs = outcome[ticket_id]
        category = outputs.get("triage", {}).get("category")
        right += category == expected
        print(f"  {ticket_id}: {status} {kind or ''} category={category} (expected {expected}) "
              f"actions={outputs.get('decide', {}).get('actions')} status={outputs.get('decide', {}).get('status')}")
    print(f"  category right in {right} of {len(TICKETS)}; {seconds:.1f} s for {len(TICKETS)} tickets")


def test_a_batch_suspended_by_model_failures_resumes_and_runs_on_the_real_model(local_model, workers, sandbox):
    task = upload(failure_threshold=2)
    # A model endpoint that answers every request with "not found" (a wrong OPENAI_BASE_URL) needs a person:
    # two such failures in a row suspend the task (one that does not answer at all only waits).
    gone = {**local_model.env, "OPENAI_BASE_URL": local_model.env["OPENAI_BASE_URL"].rstrip("/") + "/nowhere"}
    assert workers.burst(extra_env=gone) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED, workers.logs()
    assert task.status_reason == "2 consecutive failures: model rejected the request"
    assert sorted(task.items.values_list("failure_kind", flat=True)) == ["", "", "", "bad_request", "bad_request"]
    assert not sandbox.deliveries()

    plan = task_dry_run(task_id=task.pk)
    assert plan.totals["recompute"] == len(TICKETS), plan.as_dict()
    task_resume(task_id=task.pk, actor="test")
    started = time.monotonic()
    # two workers, which take turns at the recovery sweep, as `make run` starts them
    workers.start(2, extra_env=local_model.env, sweep=True)

    def settled():
        task.refresh_from_db()
        return task.status not in (TaskStatus.QUEUED, TaskStatus.RUNNING)

    wait_for(settled, timeout=1500, interval=0.5, message="the resumed task to settle")
    seconds = time.monotonic() - started
    workers.stop_all()
    task.refresh_from_db()
    assert task.resume_count == 1
    if task.status == TaskStatus.SUSPENDED:
        # the real model failed twice in a row: the reason names a classified kind
        assert any(label in task.status_reason for label in ModelError.KINDS.values()), task.status_reason
    else:
        assert task.status in (TaskStatus.COMPLETED, TaskStatus.NEEDS_REVIEW), (task.status, task.status_reason)
    # every item the resume sent back was asked of the real model again
    asked = Counter(Event.objects.filter(task=task, type=EventType.ITEM_STARTED)
                    .values_list("item__ticket_id", flat=True))
    assert asked["LM-1"] == asked["LM-2"] == 2, asked
    outcome = assert_protocol(task, sandbox)
    report(outcome, seconds)
