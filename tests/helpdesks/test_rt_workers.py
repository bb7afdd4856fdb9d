"""Real worker processes acting on a real RT: SIGKILLed around the calls, a ticket that does not exist, a hiccup on
the read before a write, RT going down in the middle of a task. RT's own ticket histories are the judge
(ops/killtest/rt.py), not the ledger.
"""

import signal
import time
import uuid

import pytest
from django.urls import reverse

from ledger.models import Effect, EffectState, EffectTransition
from ops.killtest.report import Report
from ops.killtest.rt import RTOracle, rt_writes
from ops.rt_server import freeze_rt_process, start_rt_process, stop_rt_process
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.services.tasks import task_create
from ticketagent.upload.rows import TicketRow

from ..conftest import child_settings, wait_for
from .lossy_proxy import LossyProxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BODIES = ["My invoice {n} was charged twice, please refund one payment.",
          "Tracking for order {n} has not moved in a week.",
          "Thanks, all good now. You can close this ticket."]


def rt_task(rt, n: int, *, failure_threshold: int = 3, ticket_ids=None) -> Task:
    """A task over `n` new RT tickets (or the given ticket ids)."""
    tag = uuid.uuid4().hex[:6]
    rows = []
    for i in range(n):
        email, subject, body = f"c{i}-{tag}@example.com", f"Question {i} ({tag})", BODIES[i % 3].format(n=i)
        ticket = ticket_ids[i] if ticket_ids else rt.create_ticket(subject, requestor=email, content=body)
        rows.append(TicketRow(row=i + 2, ticket_id=str(ticket), customer_email=email, subject=subject, body=body,
                              customer_name=f"Customer {i}"))
    return task_create(rows=rows, name=f"rt {tag}", allow_auto_close=True, failure_threshold=failure_threshold)


def crash_then_finish(workers, task: Task, windows: list[str], timeout: float = 60) -> None:
    """One worker per window, each SIGKILLing itself there (LEDGER_CRASH_AT=<window>:1), then an ordinary
    worker; the recovery sweep runs throughout."""
    workers.start_recovery()
    for window in windows:
        [worker] = workers.start(1, extra_env={"LEDGER_CRASH_AT": f"{window}:1"})
        assert worker.wait(timeout=timeout) == -signal.SIGKILL, workers.logs()
    workers.start(1)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=timeout,
             message=lambda: f"task to complete\n{workers.logs()}")


def _states(task: Task) -> str:
    """The task's items and open effects, for a message."""
    items = ", ".join(f"{i.pk}: {i.status}" for i in task.items.order_by("pk"))
    effects = "; ".join(f"{e.pk} {e.action} {e.state} ({e.last_reconcile or e.last_error})"[:200]
                        for e in Effect.objects.filter(owner_task=str(task.pk)).exclude(state=EffectState.COMMITTED))
    return f"items {items}\neffects not committed: {effects or 'none'}"


def oracle_check(rt, task: Task) -> Report:
    report = Report()
    RTOracle(rt).check_round(Task.objects.get(pk=task.pk), report)
    return report


def test_a_worker_killed_after_the_reply_left_it_is_settled_by_look_up_with_one_reply(rt_workers, rt_server):
    rt = rt_server
    task = rt_task(rt, 1)
    ticket = task.items.get().ticket_id
    # the first worker dies once save_draft is committed, the second right after the reply's call
    crash_then_finish(rt_workers, task, ["after_commit", "after_call"])
    notify = Effect.objects.get(owner_task=str(task.pk), action="notify_customer")
    assert notify.state == EffectState.COMMITTED and notify.resolved_by == "reconcile", notify.last_reconcile
    assert notify.last_reconcile.startswith("found by custom field")
    assert EffectTransition.objects.filter(effect=notify, to_state=EffectState.UNKNOWN).exists()
    replies = [w for w in rt_writes(rt, ticket) if w.type == "Correspond"]
    assert [w.keys for w in replies] == [{notify.idempotency_key}]
    assert oracle_check(rt, task).problems == []


def test_a_worker_killed_before_the_call_is_not_found_and_the_retry_replies_once(rt_workers, rt_server):
    rt = rt_server
    task = rt_task(rt, 1)
    ticket = task.items.get().ticket_id
    # the first worker dies once save_draft is committed, before the reply's intent (its own phase); the
    # second right after the reply's intent (attempt 1): its call never left, so the look-up says not found,
    # and the third worker's attempt 2 replies
    crash_then_finish(rt_workers, task, ["after_commit", "after_intent"])
    notify = Effect.objects.get(owner_task=str(task.pk), action="notify_customer")
    assert notify.state == EffectState.COMMITTED and notify.attempts == 2
    assert EffectTransition.objects.filter(effect=notify, from_state=EffectState.UNKNOWN,
                                           to_state=EffectState.FAILED).count() == 1
    assert EffectTransition.objects.filter(effect=notify, to_state=EffectState.FAILED,
                                           from_state=EffectState.UNKNOWN).exists()
    replies = [w for w in rt_writes(rt, ticket) if w.type == "Correspond"]
    assert [w.keys for w in replies] == [{notify.idempotency_key}]
    report = oracle_check(rt, task)
    assert report.problems == [] and report.duplicates == 0


def test_an_unknown_ticket_fails_its_item_once_with_a_clear_reason(rt_workers, rt_server):
    task = rt_task(rt_server, 1, ticket_ids=[987654])
    assert rt_workers.burst(timeout=60) == 0, rt_workers.logs()
    item = Item.objects.get(task=task)
    assert (item.status, item.attempt, item.failure_kind) == (ItemStatus.FAILED, 1, "helpdesk_refused")
    assert item.last_error == "save_draft: ticket 987654 does not exist in Request Tracker"
    [effect] = Effect.objects.filter(owner_task=str(task.pk))
    assert (effect.action, effect.state, effect.attempts) == ("save_draft", EffectState.FAILED, 1)
    time.sleep(1)  # nothing picks it up again by itself
    item.refresh_from_db()
    assert item.status == ItemStatus.FAILED and item.attempt == 1


@pytest.mark.parametrize("fault", ["503", "close", "stall"])
def test_a_hiccup_on_the_read_before_a_write_needs_nobody(rt_workers, rt_server, fault):
    """Every item sets a status: RT's adapter reads the ticket before it changes it. That read meets a 503, a
    closed connection or a stall once: asked again inside the action, the item completes, no item fails, and
    RT holds each write once."""
    rt = rt_server
    proxy = LossyProxy(rt.base_url, mode="pass")
    try:
        proxy.fault_next(fault, method="GET", path=r"^/REST/2\.0/ticket/\d+\?")
        env = {"HELPDESK_URL": proxy.url}
        task = rt_task(rt, 2)
        assert rt_workers.burst(timeout=120, extra_env=env) == 0, rt_workers.logs()
    finally:
        proxy.close()
    assert proxy.faulted == 1, proxy.requests
    assert sorted(task.items.values_list("status", flat=True)) == [ItemStatus.DONE, ItemStatus.DONE]
    assert set(task.items.values_list("attempt", flat=True)) == {1}, "asked again inside the action, not handed back"
    assert not Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED)).exists()
    report = oracle_check(rt, task)
    assert report.problems == [] and report.duplicates == 0 and report.lost_items == 0, report.problems
    assert report.delivered == Effect.objects.filter(owner_task=str(task.pk), state=EffectState.COMMITTED).count()


def test_rt_going_down_mid_task_makes_it_wait_and_it_finishes_by_itself(rt_workers, rt_server, client, alice):
    """RT first stops answering (requests in flight hang: a write's effect becomes unknown, a read is asked
    again and the action gives up before writing), then goes away (connections refused). No item fails for it
    and the task is not suspended: it waits for the helpdesk, says so, and one worker probes RT. Back on the
    same port, the probe sees it, reconcile settles the unknown effects by look-up, and the task completes by
    itself. RT's histories then hold every committed effect once, and nothing else."""
    rt = rt_server
    task = rt_task(rt, 10)
    rt_workers.start_recovery()
    rt_workers.start(2, extra_env=child_settings(CHANNEL_PROBE_MAX_SECONDS=2.0))
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).exists(), timeout=60, message="a first item done")
    client.force_login(alice)
    page = reverse("task-detail", args=[task.pk])
    freeze_rt_process(rt)
    try:
        time.sleep(3)  # longer than a read timeout: what was in flight has timed out
        stop_rt_process(rt, grace=0)
        wait_for(lambda: "Waiting for the helpdesk since" in client.get(page).content.decode(), timeout=60,
                 interval=0.5, message=lambda: f"the task page to show the wait\n{rt_workers.logs()}")
        time.sleep(10)  # down a while: nothing fails, nothing suspends
        task.refresh_from_db()
        assert task.status == TaskStatus.RUNNING and task.consecutive_failures == 0, task.status_reason
        assert not Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED)).exists()
    finally:
        start_rt_process(rt)
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=180,
             message=lambda: f"the task to complete by itself\n{_states(task)}\n{rt_workers.logs()}")
    assert not Event.objects.filter(task=task, type__in=(EventType.ITEM_FAILED, EventType.SUSPENDED)).exists()
    assert "Waiting for the helpdesk" not in client.get(page).content.decode()
    effects = Effect.objects.filter(owner_task=str(task.pk))
    assert not effects.filter(state__in=[EffectState.UNKNOWN, EffectState.INTENT]).exists()
    report = oracle_check(rt, task)
    assert report.problems == [] and report.duplicates == 0 and report.lost_items == 0, report.problems
    assert report.delivered == effects.filter(state=EffectState.COMMITTED).count()
