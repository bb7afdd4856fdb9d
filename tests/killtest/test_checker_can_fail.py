"""The kill test's checker can fail: a duplicate planted in the helpdesk, a `failed` row whose write the helpdesk
holds, an item that failed on the way and a suspension are each reported (and a clean round is not)."""

import pytest

from ledger.models import Effect, EffectState
from ops.killtest.checks import check_round
from ops.killtest.report import Report
from ops.killtest.run import nobody_needed
from tests.gate_run import effect_run
from ticketagent.eventlog.append import event_append
from ticketagent.models import EventType, ItemStatus

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

NOTIFY = {"ticket": "T-1", "body": {"to": "cust1@example.com", "subject": "Re: your refund", "body": "Done."}}


@pytest.fixture
def round_done(sandbox):
    """A task whose one item is done, its reply committed and delivered once."""
    task = make_task(1)
    item = task.items.get()
    item.status = ItemStatus.DONE
    item.save(update_fields=["status"])
    effect = effect_run(action="notify_customer", payload=NOTIFY, owner_task=str(task.pk), owner_item=str(item.pk),
                        owner_step="notify_customer", claim_token="w").effect
    assert effect.state == EffectState.COMMITTED, effect.last_error
    return task, effect


def checked(task, sandbox) -> Report:
    report = Report()
    check_round(task, sandbox, report)
    nobody_needed(report)
    return report


def test_a_clean_round_passes(round_done, sandbox):
    task, _ = round_done
    report = checked(task, sandbox)
    assert report.ok, report.problems
    assert (report.duplicates, report.failed_items, report.suspensions) == (0, 0, 0)


def test_a_planted_duplicate_is_found(round_done, sandbox):
    task, effect = round_done
    sandbox.set_faults(honor_keys=False)
    status, _ = sandbox.write("notify", "T-1", NOTIFY["body"], key=effect.idempotency_key)  # again, same key
    assert status in (200, 201), status
    report = checked(task, sandbox)
    assert report.duplicates == 1
    assert any("delivered 2 times" in p for p in report.problems), report.problems


def test_a_planted_false_failed_is_found(round_done, sandbox):
    task, effect = round_done
    Effect.objects.filter(pk=effect.pk).update(state=EffectState.FAILED)  # the ledger says it did not happen
    report = checked(task, sandbox)
    assert any("was delivered but the ledger says failed" in p for p in report.problems), report.problems


def test_an_item_failed_or_a_task_suspended_on_the_way_is_found(round_done, sandbox):
    task, _ = round_done
    event_append(task_id=task.pk, type=EventType.ITEM_FAILED, payload={"kind": "helpdesk_refused"})
    event_append(task_id=task.pk, type=EventType.SUSPENDED, payload={"reason": "3 failures"})
    report = checked(task, sandbox)
    assert (report.failed_items, report.suspensions) == (1, 1)
    assert any("failed on the way" in p for p in report.problems), report.problems
    assert any("suspension" in p for p in report.problems), report.problems
