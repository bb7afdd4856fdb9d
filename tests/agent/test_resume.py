"""Suspend, dry-run, resume; and the needs-migration way out."""

import pytest
from django.db.models import Count

from ledger.models import Effect, EffectState, EffectTransition
from tests.factories import task_replay_diff
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, TaskStatus
from ticketagent.services import ServiceError
from ticketagent.services.resume import task_clone_unfinished, task_dry_run, task_resume

from ..factories import make_task, suspended_task

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_suspended_task_resumes_and_the_dry_run_matches_what_ran(workers, sandbox):
    task = suspended_task(workers, sandbox, 6, failure_threshold=2, failing_endpoint="draft")
    sandbox.clear_faults()
    plan = task_dry_run(task_id=task.pk)
    assert plan.totals == {"recompute": 4, "retry": 2, "needs_confirmation": 0, "continue": 0, "done": 0}
    recompute = {e.item_id for e in plan.items if e.category == "recompute"}
    retry = {e.item_id for e in plan.items if e.category == "retry"}
    assert all(e.steps == ["triage", "draft", "decide"] for e in plan.items if e.category == "recompute")
    assert all(e.steps == ["save_draft"] for e in plan.items if e.category == "retry")

    task_resume(task_id=task.pk, actor="alice")
    assert workers.burst() == 0, workers.logs()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.resume_count == 1
    assert Event.objects.filter(task=task, type=EventType.RESUMED, actor="alice").count() == 1

    # what ran matches the dry-run: model steps only for "recompute", same-key retries for "retry"
    model_steps = set(Event.objects.filter(task=task, type=EventType.STEP_DONE, payload__step="triage")
                      .values_list("item_id", flat=True))
    assert model_steps == recompute | retry  # retry items ran triage before the suspension
    retried = EffectTransition.objects.filter(effect__owner_task=str(task.pk), event="EFFECT_RETRY")
    assert {int(owner) for owner in retried.values_list("effect__owner_item", flat=True)} == retry
    assert Effect.objects.filter(owner_task=str(task.pk), action="save_draft", attempts=2).count() == 2
    assert sandbox.counts()["duplicates"] == 0
    assert task_replay_diff(task.pk) == []


def test_resume_leaves_unknown_effects_alone(workers, sandbox):
    sandbox.set_faults(drop_next={"notify": 1})
    task = make_task(1)
    # a gateway's upstream timeout of 60 s: the unknown cannot be settled during this test
    assert workers.burst(extra_env={"HELPDESK_UPSTREAM_TIMEOUT": "60"}) == 0, workers.logs()
    item = task.items.get()
    assert item.status == ItemStatus.WAITING_REVIEW
    plan = task_dry_run(task_id=task.pk)
    assert plan.totals["needs_confirmation"] == 1 and not plan.can_resume
    with pytest.raises(ServiceError, match="nothing to resume"):  # nothing it could enqueue: not a resume
        task_resume(task_id=task.pk, actor="alice")
    assert workers.burst() == 0
    task.refresh_from_db()
    assert task.resume_count == 0
    item.refresh_from_db()
    assert item.status == ItemStatus.WAITING_REVIEW
    assert Effect.objects.get(owner_item=str(item.pk), action="notify_customer").state == EffectState.UNKNOWN


def test_unsupported_checkpoint_versions_need_migration_and_a_new_task_carries_on(workers, sandbox):
    task = suspended_task(workers, sandbox, 3, failure_threshold=1, failing_endpoint="status")
    sandbox.clear_faults()
    Checkpoint.objects.filter(task=task).update(plan_version=99)

    plan = task_dry_run(task_id=task.pk)
    assert "cannot honour" in plan.blocked_reason
    with pytest.raises(ServiceError, match="new task from the unfinished items"):
        task_resume(task_id=task.pk, actor="alice")
    task.refresh_from_db()
    assert task.status == TaskStatus.NEEDS_MIGRATION and task.resume_count == 0
    assert Event.objects.filter(task=task, type=EventType.NEEDS_MIGRATION).exists()

    notified_before = sandbox.counts()["by_endpoint"]["notify"]
    new = task_clone_unfinished(task_id=task.pk)
    assert new.items.count() == 3 and new.source_task_id == task.pk
    assert workers.burst() == 0, workers.logs()
    new.refresh_from_db()
    assert new.status == TaskStatus.COMPLETED, dict(new.items.values_list("status").annotate(n=Count("id")))
    # the customer notified by the old task is not notified again by the new one
    first = Item.objects.filter(task=task).order_by("row").first()
    if Effect.objects.filter(owner_item=str(first.pk), action="notify_customer", state="committed").exists():
        assert sandbox.counts()["by_endpoint"]["notify"] == notified_before + 2
    assert sandbox.counts()["duplicates"] == 0


def test_the_dry_run_command_prints_a_header_and_a_resume_of_nothing_is_refused(queue, capsys):
    from django.core.management import CommandError, call_command

    task = make_task(2)
    first, second = task.items.order_by("row")
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.WAITING_APPROVAL)
    task.__class__.objects.filter(pk=task.pk).update(status=TaskStatus.NEEDS_REVIEW)
    call_command("resume", str(task.pk), "--dry-run")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ticket", "status", "resume", "will", "steps", "note"]
    assert lines[1].startswith("T-2") and "needs_confirmation" in lines[1]
    with pytest.raises(CommandError, match="nothing to resume"):
        call_command("resume", str(task.pk))
    task.refresh_from_db()
    assert task.resume_count == 0 and not Event.objects.filter(task=task, type=EventType.RESUMED).exists()
