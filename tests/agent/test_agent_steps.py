"""Whole items through `item_process` with the real SDK against the fake model server.

Each model failure ends the item in `failed` with the failure kind and a
last_error naming the step; a failure or a crash after `draft` resumes at
`decide` without asking the model for triage or the draft again; model text
is escaped wherever the pages show it.
"""

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger.faults import SimulatedCrash
from ledger.models import Effect, EffectState
from ticketagent.llm.openai_client import OpenAIModel
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, TaskStatus
from ticketagent.pipeline.run import item_process
from ticketagent.scheduling.recovery import recover_once
from ticketagent.services.resume import task_resume

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"


def run(item: Item) -> str:
    item.refresh_from_db()
    return item_process(item_id=item.pk, attempt=item.attempt)


def one_item(**kwargs) -> Item:
    return make_task(1, **kwargs).items.get()


# --------------------------------------------------------------------------- success


def test_an_item_runs_to_done_with_the_real_sdk_and_records_its_tool_calls(openai_server, sandbox, queue):
    openai_server.mode = "tool_call"
    item = one_item()
    assert run(item) == "done"
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE
    assert openai_server.by_schema == {"Triage": 1, "Reply": 2, "Decision": 1}
    tool_events = Event.objects.filter(item=item, type=EventType.TOOL_CALL)
    assert [(e.payload["step"], e.payload["tool"]) for e in tool_events] == [("draft", "knowledge_base")]
    checkpoint = Checkpoint.objects.get(item=item)
    assert "From the knowledge base" in checkpoint.step_outputs["draft"]["body"], "the draft used the tool result"
    effects = Effect.objects.filter(owner_item=item.ref)
    assert set(effects.values_list("state", flat=True)) == {EffectState.COMMITTED}
    assert set(effects.values_list("owner_step", flat=True)) == {"save_draft", "notify_customer", "set_status"}


# --------------------------------------------------------------------------- failures end the item (waits do not)


FAILURES = [
    # id, script, default mode, failing step, kind, words in the reason, model calls
    pytest.param([], "invalid", "triage", "schema", "did not match the schema", lambda s: 2, id="schema"),
    pytest.param(["valid"], "loop", "draft", "step_limit", "step limit", lambda s: 1 + s.AGENT_MAX_STEPS,
                 id="step_limit"),
    pytest.param(["valid", "valid"], "400", "decide", "bad_request", "HTTP 400", lambda s: 3, id="bad_request"),
    pytest.param([], "401", "triage", "auth", "refused the credentials", lambda s: 1, id="auth"),
]
@pytest.mark.parametrize("script,mode,step,kind,words,calls", FAILURES)
def test_a_model_failure_fails_the_item_with_kind_and_step(openai_server, sandbox, queue, settings,
                                                           script, mode, step, kind, words, calls):
    openai_server.script(script)
    openai_server.mode = mode
    item = one_item()
    assert run(item) == f"failed at {step}: {kind}"
    item.refresh_from_db()
    assert item.status == ItemStatus.FAILED
    assert item.failure_kind == kind
    assert item.last_error.startswith(f"{step}: ") and words in item.last_error, item.last_error
    assert item.lease_token == "" and item.finished_at is not None
    assert openai_server.calls == calls(settings)
    failed = Event.objects.get(item=item, type=EventType.ITEM_FAILED)
    assert failed.payload["kind"] == kind and failed.payload["reason"].startswith(step)
    # the steps before the failure are kept; nothing acted on the world
    checkpoint = Checkpoint.objects.get(item=item)
    model_steps = ["triage", "draft", "decide"]
    assert set(checkpoint.step_outputs) == set(model_steps[:model_steps.index(step)])  # jsonb keeps no key order
    assert not Effect.objects.filter(owner_item=item.ref).exists()
    assert sandbox.counts()["deliveries"] == 0
    item.task.refresh_from_db()
    assert item.task.consecutive_failures == 1


WAITS = [
    # script, default mode, the step it waits at: a rate limit or an outage is nobody's fault but the API's
    pytest.param([], "429", "triage", id="rate_limit"),
    pytest.param(["valid"], "slow", "draft", id="timeout"),
    pytest.param(["valid", "valid"], "500", "decide", id="server"),
    pytest.param(["valid"], "drop", "draft", id="connection"),
]


@pytest.mark.parametrize("script,mode,step", WAITS)
def test_a_rate_limit_or_an_outage_hands_the_item_back_and_it_goes_on_later(openai_server, sandbox, queue,
                                                                             settings, script, mode, step):
    settings.MODEL_WAIT_SECONDS = 1.5
    openai_server.script(script)
    openai_server.mode = mode
    item = one_item()
    assert run(item).startswith(f"handed back at {step}: waiting for the model API")
    item.refresh_from_db()
    assert (item.status, item.attempt, item.failure_kind) == (ItemStatus.QUEUED, 2, "")
    assert not Event.objects.filter(item=item, type=EventType.ITEM_FAILED).exists()
    item.task.refresh_from_db()
    assert item.task.consecutive_failures == 0 and item.task.status == TaskStatus.RUNNING, "nothing suspends"
    model_steps = ["triage", "draft", "decide"]
    assert set(Checkpoint.objects.get(item=item).step_outputs) == set(model_steps[:model_steps.index(step)])
    # the API answers again: the item goes on from where it was, by itself
    settings.MODEL_WAIT_SECONDS = 30
    openai_server.mode = "valid"
    assert run(item) == "done"
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_consecutive_model_failures_suspend_the_task_with_the_reason(openai_server, sandbox, queue):
    openai_server.mode = "400"
    task = make_task(3, failure_threshold=2)
    first, second, third = task.items.order_by("row")
    run(first)
    run(second)
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED
    assert task.status_reason == "2 consecutive failures: model rejected the request"
    assert run(third) == "no work: task is suspended"
    assert openai_server.calls == 2


def test_a_success_ends_the_run_of_failures_and_the_suspension_names_the_last_item_done(openai_server, sandbox,
                                                                                         queue):
    task = make_task(5, failure_threshold=2)
    items = list(task.items.order_by("row"))
    openai_server.mode = "400"
    assert run(items[0]).startswith("failed")
    openai_server.mode = "valid"
    assert run(items[1]) == "done"
    task.refresh_from_db()
    assert task.consecutive_failures == 0 and task.last_success_item_id is None, "nothing is suspended yet"
    assert run(items[2]) == "done"
    openai_server.mode = "400"
    run(items[3])
    run(items[4])
    task.refresh_from_db()
    assert task.status == TaskStatus.SUSPENDED
    assert task.last_success_item_id == items[2].pk, "the last item done before the suspension"
    suspended = Event.objects.get(task=task, type=EventType.SUSPENDED)
    assert suspended.payload["last_success_item"] == items[2].pk


# --------------------------------------------------------------------------- resume without re-asking


def test_a_failed_decide_resumes_without_asking_for_triage_or_draft_again(openai_server, sandbox, queue):
    openai_server.script(["valid", "valid"])
    openai_server.mode = "400"
    item = one_item()
    assert run(item) == "failed at decide: bad_request"
    openai_server.mode = "valid"
    plan = task_resume(task_id=item.task_id, actor="test")
    assert plan.totals["recompute"] == 1
    assert [i.steps for i in plan.items] == [["decide"]], "the dry-run says only decide is recomputed"
    item.refresh_from_db()
    assert (item.status, item.attempt) == (ItemStatus.QUEUED, 2)
    assert run(item) == "done"
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE
    assert openai_server.calls_for("Triage") == 1
    assert openai_server.calls_for("Reply") == 1
    assert openai_server.calls_for("Decision", "400") == 1 and openai_server.calls_for("Decision", "valid") == 1
    assert sandbox.counts()["by_endpoint"]["notify"] == 1


def test_a_crash_inside_decide_resumes_after_recovery_without_asking_again(openai_server, sandbox, queue,
                                                                             monkeypatch):
    real_decide = OpenAIModel.decide
    crashes = []

    def decide_then_die(self, *args, **kwargs):
        answer = real_decide(self, *args, **kwargs)  # the model answered...
        if not crashes:
            crashes.append(answer)
            raise SimulatedCrash("worker died before the decision was checkpointed")
        return answer

    monkeypatch.setattr(OpenAIModel, "decide", decide_then_die)
    item = one_item()
    with pytest.raises(SimulatedCrash):
        run(item)
    item.refresh_from_db()
    assert item.status == ItemStatus.RUNNING and item.lease_token, "a dead worker leaves its lease behind"
    assert set(Checkpoint.objects.get(item=item).step_outputs) == {"triage", "draft"}

    Item.objects.filter(pk=item.pk).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=60))
    assert recover_once()["recovered"] == 1
    item.refresh_from_db()
    assert (item.status, item.attempt) == (ItemStatus.QUEUED, 2)
    assert Event.objects.filter(item=item, type=EventType.RECOVERED).exists()

    assert run(item) == "done"
    item.refresh_from_db()
    assert item.status == ItemStatus.DONE
    assert openai_server.calls_for("Triage") == 1
    assert openai_server.calls_for("Reply") == 1
    assert openai_server.calls_for("Decision") == 2, "only the lost decision is asked again"
    committed = Effect.objects.filter(owner_item=item.ref, state=EffectState.COMMITTED)
    assert committed.count() == sandbox.counts()["deliveries"] == 3
    assert sandbox.counts()["duplicates"] == 0


# --------------------------------------------------------------------------- model text is escaped


def test_model_text_is_escaped_on_the_item_and_task_pages(openai_server, sandbox, queue, client, alice):
    openai_server.answers["Reply"] = {"subject": f"Re: {XSS_IMG}", "body": f"Hello {XSS_SCRIPT} and {XSS_IMG}"}
    openai_server.answers["Decision"] = {"actions": ["save_draft"], "status": None, "reason": XSS_SCRIPT}
    item = one_item()
    assert run(item) == "done"
    client.force_login(alice)
    page = client.get(reverse("item-detail", args=[item.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert XSS_SCRIPT not in html and XSS_IMG not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_a_model_refusal_shown_as_the_failure_reason_is_escaped(openai_server, sandbox, queue, client, bob):
    openai_server.mode = "refusal"
    openai_server.refusal_text = f"I refuse {XSS_SCRIPT} {XSS_IMG}"
    item = one_item()
    assert run(item) == "failed at triage: schema"
    item.refresh_from_db()
    assert XSS_SCRIPT in item.last_error, "the model's text reaches the failure reason..."
    client.force_login(bob)  # a viewer may look
    for url in (reverse("item-detail", args=[item.pk]), reverse("task-detail", args=[item.task_id])):
        html = client.get(url).content.decode()
        assert XSS_SCRIPT not in html and XSS_IMG not in html, url  # ...but never as markup
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url


# --------------------------------------------------------------------------- real worker processes


def test_real_worker_processes_reach_the_fake_model_server(openai_server, workers, sandbox):
    openai_server.mode = "tool_call"
    task = make_task(2)
    assert task.model_label.startswith("local model: "), "the fake model server is on this machine"
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, workers.logs()
    assert openai_server.by_schema == {"Triage": 2, "Reply": 4, "Decision": 2}
    assert {r["ticket_id"] for r in openai_server.requests} == {"T-1", "T-2"}
    assert Event.objects.filter(task=task, type=EventType.TOOL_CALL).count() == 2
    assert sandbox.counts()["duplicates"] == 0
