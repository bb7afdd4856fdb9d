"""One rule for every path that reconciles: a look-up's "not found" decides "did not happen" only from the effect's
settle time (`ledger.services.reconcile_not_before`). The recovery sweep, `manage.py recover`, the worker settling
its own item, "Reconcile now" on the review page and the service itself: before the settle time each leaves the
effect unknown, after it each may fail it (so the item retries with the same key).

The effect: a reply the helpdesk answered 503 without recording it, behind a gateway whose upstream timeout is
60 s -- settled 62 s after the 503, since a gateway's 5xx may still land. Before: "Reconcile now" skipped the settle
time and answered "did not happen" at once.
"""

import pytest
from django.core.management import call_command
from django.urls import reverse

from ledger.clock import db_now
from ledger.models import Effect, EffectState, Verdict
from ledger.services import effect_reconcile
from tests.gate_run import effect_run
from ticketagent.models import ItemStatus
from ticketagent.plan import effect_action
from ticketagent.scheduling.recovery import item_settle_unknowns, reconcile_unknowns

from ..factories import make_task
from ..ledger.helpers import settled
from ..web.conftest import HTMX, notify_payload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unsettled(sandbox, queue, settings) -> Effect:
    """An unknown reply on a waiting item: answered 503 (nothing recorded), its settle time a minute away."""
    settings.HELPDESK_UPSTREAM_TIMEOUT = 60
    task = make_task(1)
    item = task.items.get()
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    result = effect_run(action=effect_action("notify_customer", notify_channel="helpdesk"),
                        payload=notify_payload(item), owner_task=str(task.pk), owner_item=item.ref,
                        owner_step="notify_customer", claim_token="test-worker")
    assert (result.state, result.effect.answered) == (EffectState.UNKNOWN, False), result.effect.last_error
    task.items.filter(pk=item.pk).update(status=ItemStatus.WAITING_REVIEW)
    assert sandbox.deliveries(key=result.effect.idempotency_key) == []
    return result.effect


def sweep(effect, **_):
    reconcile_unknowns(db_now())


def command(effect, **_):
    call_command("recover")


def worker(effect, **_):
    item_settle_unknowns(int(effect.owner_item))


def review_page(effect, *, client, alice):
    client.force_login(alice)
    answer = client.post(reverse("effect-reconcile", args=[effect.pk]), headers=HTMX)
    assert answer.status_code == 200, answer.content.decode()


def service(effect, **_):
    effect_reconcile(effect_id=effect.pk, actor="alice")


PATHS = [sweep, command, worker, review_page, service]


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_before_the_settle_time_not_found_leaves_the_effect_unknown(unsettled, path, client, alice):
    path(unsettled, client=client, alice=alice)
    effect = Effect.objects.get(pk=unsettled.pk)
    assert (effect.state, effect.verdict, effect.attempts) == (EffectState.UNKNOWN, "", 1)
    assert effect.transitions.filter(to_state=EffectState.FAILED).count() == 0
    if effect.reconciled_at is not None:  # a path that asked keeps the answer, saying it is not trusted yet
        assert "not trusted" in effect.last_reconcile, effect.last_reconcile


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_from_the_settle_time_not_found_is_did_not_happen(unsettled, path, client, alice):
    settled(unsettled.pk)
    path(unsettled, client=client, alice=alice)
    effect = Effect.objects.get(pk=unsettled.pk)
    assert (effect.state, effect.verdict, effect.resolved_by) == (EffectState.FAILED, Verdict.NOT_HAPPENED,
                                                                   "reconcile")
