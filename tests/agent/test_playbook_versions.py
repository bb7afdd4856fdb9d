"""Playbook versions and tasks, on real workers: a task keeps its version, moves only when told, and a
go-live executes the rehearsed decisions without asking the model again."""

import pytest

from ledger.models import BlockedDuplicate, Effect, EffectState
from tests.factories import task_replay_diff
from ticketagent.models import EventType, ItemStatus, Task, TaskStatus
from ticketagent.playbooks.services import draft_open, draft_update, playbook_import, version_publish
from ticketagent.playbooks.standard import standard_spec
from ticketagent.services.rehearsal import item_row, task_go_live
from ticketagent.services.resume import task_dry_run, task_move_version, task_resume
from ticketagent.services.tasks import task_pause

from ..conftest import wait_for
from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

V2_SIGNATURE = "— signed under version 2"


def versions():
    """A playbook published as v1, then v2 (another signature)."""
    spec = standard_spec().model_dump(mode="json")
    v1 = version_publish(version_id=playbook_import(data={**spec, "name": "Moving"}).pk)
    return v1, lambda: version_publish(version_id=draft_update(
        version_id=draft_open(playbook_id=v1.playbook_id).pk,
        changes={"reply": {**spec["reply"], "signature": V2_SIGNATURE}}).pk)


def test_publishing_v2_mid_task_leaves_the_task_on_v1_and_the_move_recomputes(workers, sandbox, openai_server):
    v1, publish_v2 = versions()
    openai_server.latency = 0.3  # about a second an item: the task is still running when v2 is published
    try:
        task = make_task(6, playbook_version=v1)
        workers.start(1, extra_env=openai_server.worker_env)
        wait_for(lambda: task.items.filter(status=ItemStatus.DONE).exists(), timeout=60, message="a first item done")
        task_pause(task_id=task.pk, actor="alice")
        v2 = publish_v2()
        wait_for(lambda: not task.items.filter(status=ItemStatus.RUNNING).exists(), timeout=30,
                 message="the running item to stop")
    finally:
        openai_server.latency = 0
    task.refresh_from_db()
    assert task.playbook_version_id == v1.pk, "a newer version never changes a running task by itself"
    done_on_v1 = set(task.items.filter(status=ItemStatus.DONE).values_list("pk", flat=True))
    plan = task_dry_run(task_id=task.pk)
    assert plan.newer_version == v2 and plan.movable == 6 - len(done_on_v1)

    assert task_move_version(task_id=task.pk, version_id=v2.pk, actor="alice") == plan.movable
    task_resume(task_id=task.pk, actor="alice")
    wait_for(lambda: task.items.filter(status=ItemStatus.DONE).count() == 6, timeout=60, message="the rest done")
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.COMPLETED, timeout=30,
             message="the task to close after its last item")
    workers.stop_all()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.playbook_version_id == v1.pk
    for item in task.items.select_related("checkpoint"):
        body = item.checkpoint.step_outputs["draft"]["body"]
        moved = item.pk not in done_on_v1
        assert item.playbook_version_id == item.checkpoint.playbook_version_id == (v2.pk if moved else v1.pk)
        assert body.endswith(V2_SIGNATURE) == moved
        assert item.events.filter(type=EventType.ITEM_MOVED).exists() == moved
    assert task_replay_diff(task.pk) == [], "replay rebuilds the moved checkpoints too"


def test_go_live_makes_no_model_call_for_unchanged_tickets_and_one_decision_for_a_changed_one(
        workers, sandbox, openai_server):
    rehearsal = make_task(3, rehearsal=True)
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    rehearsal.refresh_from_db()
    assert rehearsal.status == TaskStatus.COMPLETED
    assert sandbox.counts()["deliveries"] == 0, "a rehearsal sends nothing"
    assert openai_server.calls == 9

    rows = [item_row(item) for item in rehearsal.items.order_by("row")]
    changed = rows[1].ticket_id
    rows[1] = item_row(rehearsal.items.get(ticket_id=changed))
    rows[1] = type(rows[1])(**{**{f: getattr(rows[1], f) for f in rows[1].__slots__},
                               "body": "Actually my parcel never arrived."})
    openai_server.reset()
    live = task_go_live(task_id=rehearsal.pk, rows=rows)
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    live.refresh_from_db()
    assert live.status == TaskStatus.COMPLETED and not live.rehearsal
    asked = {r["ticket_id"] for r in openai_server.requests}
    assert asked == {changed} and openai_server.calls == 3, "only the changed ticket was decided again"
    recomputed = live.items.get(ticket_id=changed)
    assert recomputed.events.filter(type=EventType.PLAN_RECOMPUTED).exists()
    assert live.items.get(ticket_id=rows[0].ticket_id).events.filter(type=EventType.PLAN_CARRIED).exists()
    assert sandbox.counts()["by_endpoint"]["notify"] == 3
    assert task_replay_diff(live.pk) == []


def test_a_moved_item_whose_notification_failed_sends_the_new_one_once(workers, sandbox):
    """A `once` effect that failed provably did not happen: after a move, the regenerated payload for its slot
    goes out (once), on the same ledger row -- not a conflict with the payload that never went out."""
    spec = standard_spec().model_dump(mode="json")
    no_draft = [{"name": "No drafts", "when": ["category is billing"], "forbid": ["save_draft"]}]
    v1 = version_publish(version_id=playbook_import(data={**spec, "name": "Moving", "rules": no_draft}).pk)
    sandbox.set_faults(error_status=422, error_rate={"notify": 1.0})
    task = make_task(2, playbook_version=v1, failure_threshold=5)
    assert workers.burst() == 0, workers.logs()
    failed = list(Effect.objects.filter(owner_task=str(task.pk), owner_step="notify_customer")
                  .values_list("owner_item", "idempotency_key"))
    assert len(failed) == 2 and not Effect.objects.filter(owner_task=str(task.pk)).exclude(
        state=EffectState.FAILED).exists(), "each item failed at its notification, nothing else was sent"
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.FAILED}

    sandbox.clear_faults()
    v2 = version_publish(version_id=draft_update(
        version_id=draft_open(playbook_id=v1.playbook_id).pk,
        changes={"reply": {**spec["reply"], "signature": V2_SIGNATURE}}).pk)
    assert task_move_version(task_id=task.pk, version_id=v2.pk, actor="alice") == 2
    task_resume(task_id=task.pk, actor="alice")
    assert workers.burst() == 0, workers.logs()

    assert list(task.items.values_list("status", "last_error")) == [(ItemStatus.DONE, "")] * 2
    assert not BlockedDuplicate.objects.filter(owner_task=str(task.pk)).exists()
    for owner_item, old_key in failed:
        effect = Effect.objects.get(owner_item=owner_item, owner_step="notify_customer")
        assert (effect.state, effect.attempts) == (EffectState.COMMITTED, 2)
        assert effect.idempotency_key != old_key and effect.payload["body"]["body"].endswith(V2_SIGNATURE)
        assert [d["key"] for d in sandbox.deliveries(endpoint="notify", ticket=effect.payload["ticket"])] == [
            effect.idempotency_key], "the new notification reached the helpdesk once"
    assert task_replay_diff(task.pk) == [], "replay follows the row to its new payload"
