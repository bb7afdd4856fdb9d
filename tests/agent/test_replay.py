"""`manage.py replay`: the event log alone rebuilds checkpoints and ledger."""

import pytest
from django.core.management import call_command
from django.urls import reverse

from ledger.models import Effect
from ticketagent.models import Checkpoint

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def replay(*args):
    try:
        call_command("replay", *args)
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.fixture
def finished_task(workers, sandbox):
    sandbox.set_faults(drop_next={"notify": 1})  # one unknown, reconciled below
    # (no link in the subject: the offline draft quotes it, and a link only the ticket names holds the reply)
    task = make_task(3, subject="=HYPERLINK(\"evil\") refund", body="'quoted' and -1+1")
    assert workers.burst() == 0, workers.logs()
    from ledger.services import effect_review

    for effect in Effect.objects.filter(state="unknown"):  # decided by a user whose name looks like a formula
        effect_review(effect_id=effect.pk, verdict="happened", reason="'checked' in the helpdesk", actor="=ops")
    assert workers.burst() == 0, workers.logs()
    return task


def test_replay_of_the_stored_events_and_of_the_exported_jsonl_match_the_tables(finished_task, client, alice,
                                                                                tmp_path, capsys):
    assert replay(str(finished_task.pk)) == 0
    client.force_login(alice)
    response = client.get(reverse("task-events", args=[finished_task.pk]))
    export = tmp_path / "events.jsonl"
    export.write_bytes(b"".join(response.streaming_content))
    assert b'"\'=ops"' in export.read_bytes(), "formulas are neutralised in the export"
    assert replay(str(finished_task.pk), "--from", str(export)) == 0, capsys.readouterr().out


def test_replay_finds_a_change_made_without_its_event(finished_task, capsys):
    Effect.objects.filter(owner_task=str(finished_task.pk), action="notify_customer").update(attempts=7)
    Checkpoint.objects.filter(task=finished_task).update(cursor=1)
    assert replay(str(finished_task.pk)) == 1
    out = capsys.readouterr().out
    assert "attempts: events say 1, tables say 7" in out or "attempts" in out
    assert "cursor" in out
