"""What operators see: the tasks page, the task page, the review queue and
the admin, rendered by the real views from rows made by the services."""

import datetime as dt
import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils import timezone

from ledger.models import Effect, EffectState, EffectTransition
from ticketagent.models import Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.services.resume import task_resume

from ..factories import make_task
from .conftest import HTMX

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def _finish(task, n, *, minutes_ago=2):
    """Mark n items done, spread over the last minutes (as workers would)."""
    now = timezone.now()
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, started_at=now - dt.timedelta(minutes=minutes_ago))
    for i, item in enumerate(task.items.order_by("row")[:n]):
        Item.objects.filter(pk=item.pk).update(status=ItemStatus.DONE,
                                               finished_at=now - dt.timedelta(seconds=10 * (n - i)))


class TestTasksPage:
    def test_live_progress_per_task_items_per_minute_and_eta(self, client, bob):
        task = make_task(10)
        _finish(task, 4)
        client.force_login(bob)
        html = client.get(reverse("tasks")).content.decode()
        row = html[html.index(f'id="task-{task.pk}"'):]
        row = row[:row.index("</tr>")]
        assert 'data-percent="40"' in row and "4 / 10" in row
        assert "done 4" in row and "queued 6" in row
        assert "items/min" in row and "ETA" in row

    def test_suspended_tasks_come_first_with_their_reason(self, client, bob):
        older = make_task(1, name="older")
        make_task(1, name="newer")
        Task.objects.filter(pk=older.pk).update(status=TaskStatus.SUSPENDED,
                                                status_reason="3 consecutive failures: model server error")
        client.force_login(bob)
        html = client.get(reverse("tasks")).content.decode()
        assert html.index(f'id="task-{older.pk}"') < html.index("newer")
        assert "3 consecutive failures: model server error" in html

    @pytest.mark.parametrize("status_filter, shown", [
        ("running", {"running", "queued"}), ("suspended", {"suspended", "paused"}),
        ("needs_review", {"needs_review"}), ("done", {"completed", "cancelled"}), ("", None)])
    def test_filters(self, client, bob, status_filter, shown):
        tasks = {}
        for status in ("queued", "running", "suspended", "paused", "needs_review", "completed", "cancelled"):
            tasks[status] = make_task(1, name=f"task-{status}")
            Task.objects.filter(pk=tasks[status].pk).update(status=status)
        client.force_login(bob)
        html = client.get(reverse("tasks"), {"status": status_filter}).content.decode()
        for status, task in tasks.items():
            present = f'id="task-{task.pk}"' in html
            assert present == (shown is None or status in shown), (status_filter, status)

    def test_health_tiles(self, client, bob, unknown_effect, settings):
        settings.UNKNOWN_AGE_WARN_SECONDS = 300
        effect = unknown_effect()
        task_resume(task_id=make_task(1).pk, actor="alice")
        client.force_login(bob)
        html = client.get(reverse("tasks")).content.decode()
        tile = html[html.index('id="tile-unknown"'):]
        tile = tile[:tile.index("</div>")]
        assert "<b>1</b>" in tile and "alert" not in tile.split(">")[0]
        assert '<b>1</b><span>resume</span>' in html
        assert 'id="tile-items"' in html and "waiting for review" in html and 'id="tile-effects"' in html

        Effect.objects.filter(pk=effect.pk).update(intent_at=timezone.now() - dt.timedelta(minutes=20))
        html = client.get(reverse("tasks")).content.decode()
        tile = html[html.index('id="tile-unknown"'):]
        assert "alert" in tile.split(">")[0], "an unknown older than the threshold is highlighted"
        assert "20 min" in tile[:tile.index("</div>")]

    def test_the_table_polls_while_a_task_is_live_and_the_tiles_poll_on_their_own(self, client, bob):
        task = make_task(1)
        client.force_login(bob)
        body = client.get(reverse("tasks"), {"status": "running"}, headers=HTMX)
        assert body.status_code == 200
        html = body.content.decode()
        assert html.lstrip().startswith('<table class="tasks stack" id="task-table" data-live="yes"')
        assert re.search(r'hx-get="/\?seen=[0-9a-f]{20}&amp;status=running"', html) and "<html" not in html

        Task.objects.filter(pk=task.pk).update(status=TaskStatus.COMPLETED)
        final = client.get(reverse("tasks"), headers=HTMX)
        assert final.status_code == 286, "nothing is live: the table stops polling"
        assert 'data-live="no"' in final.content.decode() and "hx-trigger" not in final.content.decode()

        tiles = client.get(reverse("tasks"), {"part": "health", "table_live": "0"}, headers=HTMX).content.decode()
        assert tiles.lstrip().startswith('<section class="tiles" id="health"') and 'id="task-table"' not in tiles
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING)
        tiles = client.get(reverse("tasks"), {"part": "health", "table_live": "0"}, headers=HTMX).content.decode()
        assert 'id="task-table" hx-swap-oob="true"' in tiles, "a task became live: the table comes along and polls"


class TestTaskPage:
    def test_items_with_step_state_attempts_effects_and_last_error(self, client, bob, unknown_effect):
        effect = unknown_effect()
        task = Task.objects.get(pk=int(effect.owner_task))
        Item.objects.filter(pk=int(effect.owner_item)).update(last_error="notify_customer: outcome unknown", attempt=2)
        client.force_login(bob)
        html = client.get(reverse("task-detail", args=[task.pk])).content.decode()
        row = html[html.index(f'id="item-{effect.owner_item}"'):]
        row = row[:row.index("</tr>")]
        # attempt 2 by its number, but no worker ever started it (the effect was made by hand here)
        assert "waiting for review" in row and re.search(r'<td data-label="Attempts"[^>]*>0</td>', row)
        assert "triage" in row  # no checkpoint yet: the next step is the first one
        assert 'class="pill e-unknown"' in row and "notify_customer" in row
        assert "outcome unknown" in row
        assert reverse("task-events", args=[task.pk]) in html
        assert "checkpoint" in row

    def test_items_are_paginated(self, client, bob):
        task = make_task(55)
        client.force_login(bob)
        first = client.get(reverse("task-detail", args=[task.pk])).content.decode()
        assert "page 1 of 2" in first and "T-50" in first and "T-51" not in first
        second = client.get(reverse("task-detail", args=[task.pk]), {"page": 2}).content.decode()
        assert "T-55" in second and "T-1<" not in second

    def test_the_event_timeline_shows_who_did_what(self, client, bob):
        task = make_task(1)
        task_resume(task_id=task.pk, actor="alice")
        client.force_login(bob)
        html = client.get(reverse("task-detail", args=[task.pk])).content.decode()
        assert "<b>resumed</b>" in html and "· alice" in html and "<b>task created</b>" in html

    def test_jsonl_export(self, client, bob):
        task = make_task(2)
        client.force_login(bob)
        response = client.get(reverse("task-events", args=[task.pk]))
        lines = b"".join(response.streaming_content).decode().splitlines()
        import json

        events = [json.loads(line) for line in lines]
        assert [e["type"] for e in events] == ["TASK_CREATED", "PLANNED"]
        assert set(events[0]) >= {"timestamp", "type", "payload"}

    @pytest.mark.django_db(transaction=True)  # the lease's heartbeat renews it from a connection of its own
    def test_the_jsonl_export_names_each_item_by_its_ticket(self, client, bob, sandbox):
        """Before: items only by database id."""
        import json

        from ticketagent.pipeline.run import item_process

        task = make_task(1, prefix="EX")
        item = task.items.get()
        assert item_process(item_id=item.pk, attempt=item.attempt) == "done"
        client.force_login(bob)
        response = client.get(reverse("task-events", args=[task.pk]))
        lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
        about_items = [line for line in lines if line["item"] is not None]
        assert about_items and all(line["ticket"] == "EX-1" for line in about_items)
        assert {"EFFECT_COMMITTED", "ITEM_DONE"} <= {line["type"] for line in about_items}
        assert all("ticket" not in line for line in lines if line["item"] is None)

    def test_the_checkpoint_view(self, client, bob):
        from ticketagent.models import Checkpoint

        task = make_task(1)
        item = task.items.get()
        Checkpoint.objects.create(item=item, task=task, plan_version=1, schema_version=1, cursor=1,
                                  playbook_version_id=item.playbook_version_id,
                                  input_hash=item.input_hash(), step_outputs={"triage": {"category": "billing"}})
        client.force_login(bob)
        html = client.get(reverse("item-detail", args=[item.pk])).content.decode()
        assert "&quot;cursor&quot;: 1" in html and "billing" in html and item.input_hash() in html


class TestActionsWithHtmx:
    def test_resume_opens_the_dry_run_in_place_and_confirm_enqueues(self, client, alice):
        task = make_task(3)
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures")
        client.force_login(alice)
        page = client.get(reverse("task-detail", args=[task.pk])).content.decode()
        assert f'hx-get="{reverse("task-dry-run", args=[task.pk])}"' in page
        assert page.count('id="dry-run"') == 1

        fragment = client.get(reverse("task-dry-run", args=[task.pk]), headers=HTMX).content.decode()
        assert fragment.lstrip().startswith('<div id="dry-run"')
        assert "recompute 3" in fragment and "Confirm resume (3 items)" in fragment
        assert Task.objects.get(pk=task.pk).resume_count == 0, "the dry-run changes nothing"

        response = client.post(reverse("task-resume", args=[task.pk]), headers=HTMX)
        body = response.content.decode()
        assert response.status_code == 200 and body.lstrip().startswith('<div id="controls"')
        assert "Resumed: 3 items enqueued" in body and 'id="pause"' in body
        # the progress comes along out of band: the new status, and what the next poll compares with
        assert '<div id="progress" data-status="running" hx-swap-oob="true"' in body and "shown=running" in body
        assert Event.objects.filter(task=task, type=EventType.RESUMED, actor="alice").count() == 1

    def test_without_javascript_the_dry_run_is_a_page_with_the_confirm_form(self, client, alice):
        task = make_task(2)
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.PAUSED)
        client.force_login(alice)
        page = client.get(reverse("task-detail", args=[task.pk])).content.decode()
        assert f'href="{reverse("task-dry-run", args=[task.pk])}#dry-run"' in page
        html = client.get(reverse("task-dry-run", args=[task.pk])).content.decode()
        assert "<html" in html and "Dry-run: what resuming will do" in html
        assert f'action="{reverse("task-resume", args=[task.pk])}"' in html and 'method="post"' in html
        assert client.post(reverse("task-resume", args=[task.pk])).status_code == 302
        assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING

    def test_an_action_that_cannot_apply_answers_409_with_the_error_inline(self, client, alice):
        task = make_task(1)
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.CANCELLED)
        client.force_login(alice)
        response = client.post(reverse("task-pause", args=[task.pk]), headers=HTMX)
        assert response.status_code == 409
        body = response.content.decode()
        assert body.lstrip().startswith('<div id="controls"')
        assert 'role="alert"' in body and "only a queued or running task can be paused" in body
        page = client.post(reverse("task-pause", args=[task.pk]))
        assert page.status_code == 409 and b"only a queued or running task can be paused" in page.content

    def test_the_progress_poll_brings_the_actions_along_when_the_status_changed(self, client, alice):
        task = make_task(2)
        client.force_login(alice)
        url = reverse("task-progress", args=[task.pk])
        same = client.get(url, {"shown": "queued"}, headers=HTMX).content.decode()
        assert 'id="controls"' not in same
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.SUSPENDED, status_reason="3 consecutive failures")
        moved = client.get(url, {"shown": "queued"}, headers=HTMX).content.decode()
        assert 'hx-sync="#task-head:replace" hx-swap-oob="true">' in moved and 'id="resume"' in moved
        assert "shown=suspended" in moved

    def test_the_review_decision_needs_a_reason_and_says_so_inline(self, client, alice, unknown_effect):
        effect = unknown_effect()
        client.force_login(alice)
        url = reverse("effect-review", args=[effect.pk])
        response = client.post(url, {"verdict": "happened", "reason": "  "}, headers=HTMX)
        assert response.status_code == 409
        body = response.content.decode()
        assert body.lstrip().startswith(f'<tr id="effect-{effect.pk}"')
        assert "a reason is required" in body and "Decide" in body
        assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN
        no_js = client.post(url, {"verdict": "happened", "reason": ""})
        assert no_js.status_code == 409 and b"a reason is required" in no_js.content and b"<html" in no_js.content

    def test_a_decision_is_a_transition_with_the_user_and_the_reason(self, client, alice, unknown_effect):
        effect = unknown_effect()
        client.force_login(alice)
        body = client.post(reverse("effect-review", args=[effect.pk]),
                           {"verdict": "not_happened", "reason": "not in the customer's inbox"},
                           headers=HTMX).content.decode()
        assert "did not happen — retry" in body and "by alice" in body
        # its one record is the ledger's transition, merged into the task's log
        transition = EffectTransition.objects.get(event=EventType.REVIEWED)
        assert transition.actor == "alice" and "not in the customer's inbox" in transition.note
        assert transition.snapshot["verdict"] == "not_happened" and transition.effect_id == effect.pk
        assert not Event.objects.filter(type=EventType.REVIEWED).exists()

    def test_reconcile_now_asks_the_channel(self, client, alice, unknown_effect):
        effect = unknown_effect()
        client.force_login(alice)
        body = client.post(reverse("effect-reconcile", args=[effect.pk]), headers=HTMX).content.decode()
        effect.refresh_from_db()
        assert effect.state == EffectState.COMMITTED and effect.resolved_by == "reconcile"
        assert 'data-state="committed"' in body and "reconcile" in body
        assert EffectTransition.objects.filter(event=EventType.EFFECT_RECONCILED, actor="alice").exists()

    def test_reconcile_on_a_channel_without_look_up_is_refused_inline(self, client, alice, unknown_effect):
        effect = unknown_effect(channel="email")
        client.force_login(alice)
        review = client.get(reverse("review")).content.decode()
        assert "email has no look-up by key" in review and "Reconcile now" not in review
        response = client.post(reverse("effect-reconcile", args=[effect.pk]), headers=HTMX)
        assert response.status_code == 409 and b"no look-up" in response.content

    def test_approve_and_reject_need_a_reason(self, client, alice):
        task = make_task(2)
        first, second = task.items.order_by("row")
        task.items.update(status=ItemStatus.WAITING_APPROVAL)
        client.force_login(alice)
        review = client.get(reverse("review")).content.decode()
        assert f'id="approval-{first.pk}"' in review and "Approve" in review and "Reject" in review
        missing = client.post(reverse("item-approval", args=[first.pk]), {"approval": "approve"}, headers=HTMX)
        assert missing.status_code == 409 and b"a reason is required" in missing.content
        nothing = client.post(reverse("item-approval", args=[first.pk]), {"reason": "x"}, headers=HTMX)
        assert nothing.status_code == 409 and b"approve or reject" in nothing.content
        ok = client.post(reverse("item-approval", args=[second.pk]), {"approval": "reject", "reason": "keep open"},
                         headers=HTMX)
        assert ok.status_code == 200 and b"rejected" in ok.content
        assert Event.objects.filter(type=EventType.REJECTED, actor="alice", item=second).exists()

    def test_a_decision_on_a_stale_row_says_what_was_decided_meanwhile_and_changes_nothing(self, client, alice):
        task = make_task(1)
        [item] = task.items.all()
        task.items.update(status=ItemStatus.WAITING_APPROVAL)
        carol = User.objects.create_user("carol")
        carol.groups.add(Group.objects.get(name="operators"))
        client.force_login(carol)
        assert client.post(reverse("item-approval", args=[item.pk]), {"approval": "approve", "reason": "fine"},
                           headers=HTMX).status_code == 200
        client.force_login(alice)  # her page still shows the row waiting
        stale = client.post(reverse("item-approval", args=[item.pk]), {"approval": "reject_stop", "reason": "no"},
                            headers=HTMX)
        body = stale.content.decode()
        assert stale.status_code == 409 and "already decided by carol at " in body and "(approved)" in body, body
        assert "nothing changed" in body
        item.refresh_from_db()
        assert item.approval == "approved" and item.approval_by == "carol" and item.status != ItemStatus.SKIPPED
        assert not Event.objects.filter(type=EventType.REJECTED).exists()


class TestReviewQueue:
    def test_every_unknown_effect_with_what_a_person_needs_to_decide(self, client, bob, unknown_effect):
        effect = unknown_effect()
        item = Item.objects.get(pk=int(effect.owner_item))
        client.force_login(bob)
        html = client.get(reverse("review")).content.decode()
        row = html[html.index(f'id="effect-{effect.pk}"'):]
        row = row[:row.index("</tr>")]
        for expected in (f"task {effect.owner_task}", item.ticket_id, "notify_customer", "helpdesk",
                         effect.idempotency_key, "Your refund is on its way", "attempt 1", "waiting for review"):
            assert expected in row, expected
        assert "Reconcile now" not in row and "Decide" not in row, "viewers see no buttons"


class TestAdmin:
    def test_every_model_is_in_the_admin(self):
        for app in ("ticketagent", "ledger"):
            for model in apps.get_app_config(app).get_models():
                assert admin.site.is_registered(model), model

    def test_ledger_rows_and_the_event_log_are_read_only(self, client, staff, unknown_effect):
        effect = unknown_effect()
        client.force_login(staff)
        for model in apps.get_app_config("ledger").get_models():
            model_admin = admin.site._registry[model]
            request = type("R", (), {"user": staff})()
            assert not model_admin.has_add_permission(request)
            assert not model_admin.has_change_permission(request)
            assert not model_admin.has_delete_permission(request)
        assert client.get(reverse("admin:ledger_effect_change", args=[effect.pk])).status_code == 200
        assert client.post(reverse("admin:ledger_effect_delete", args=[effect.pk]), {"post": "yes"}).status_code == 403
        assert Effect.objects.filter(pk=effect.pk).exists()

    def test_tasks_cannot_be_deleted_in_the_admin(self, client, staff):
        task = make_task(2)
        client.force_login(staff)
        assert client.get(reverse("admin:ticketagent_task_changelist")).status_code == 200
        assert client.get(reverse("admin:ticketagent_task_change", args=[task.pk])).status_code == 200
        assert client.post(reverse("admin:ticketagent_task_delete", args=[task.pk]), {"post": "yes"}).status_code == 403
        changelist = client.get(reverse("admin:ticketagent_task_changelist")).content.decode()
        assert "delete_selected" not in changelist
        assert Task.objects.filter(pk=task.pk).exists() and Event.objects.filter(task=task).exists()
        for name in ("item", "event", "checkpoint", "blob"):
            assert client.get(reverse(f"admin:ticketagent_{name}_changelist")).status_code == 200

    def test_staff_get_a_link_to_the_rq_dashboard(self, client, staff, alice):
        client.force_login(alice)
        assert b'id="nav-queues"' not in client.get(reverse("tasks")).content
        client.force_login(staff)
        html = client.get(reverse("tasks")).content.decode()
        assert f'href="{reverse("django_rq:home")}" id="nav-queues"' in html

    def test_the_rq_dashboard_answers_staff(self, client, staff, redis_conn):
        client.force_login(staff)
        assert client.get(reverse("django_rq:home")).status_code == 200
