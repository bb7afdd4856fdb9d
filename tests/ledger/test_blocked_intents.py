"""An intent the gate refuses is recorded and announced: a BlockedDuplicate
row (kind, the refused key, payload hash and summary, owner, lease token,
the existing row's state) and an EFFECT_BLOCKED signal naming what was
already held -- the key for a duplicate, the slot for a conflict."""

import pytest

from ledger.keys import payload_hash
from ledger.models import BlockedDuplicate, EffectState
from ledger.signals import effect_changed

from .helpers import NOTIFY, run_notify

pytestmark = pytest.mark.django_db(transaction=True)

REGENERATED = {**NOTIFY, "body": {**NOTIFY["body"], "body": "A regenerated draft."}}


@pytest.fixture
def announced():
    seen = []

    def listen(sender, event, effect, actor, note, from_state, **kwargs):
        if event == "EFFECT_BLOCKED":
            seen.append((effect.pk, actor, note, from_state))

    effect_changed.connect(listen)
    yield seen
    effect_changed.disconnect(listen)


class TestABlockedIntent:
    @pytest.mark.parametrize("payload, kind, held", [(NOTIFY, "duplicate", "key"), (REGENERATED, "conflict", "slot")])
    def test_is_recorded_and_announced(self, sandbox, announced, payload, kind, held):
        first = run_notify().effect
        second = run_notify(payload, claim_token="worker-b", item="i1")
        assert (second.blocked, second.called, second.effect.pk) == (kind, False, first.pk)

        row = BlockedDuplicate.objects.get()
        assert (row.effect_id, row.kind, row.existing_state, row.claim_token) == (
            first.pk, kind, EffectState.COMMITTED, "worker-b")
        assert (row.owner_task, row.owner_item, row.owner_step) == ("t1", "i1", "notify_customer")
        assert row.payload_hash == payload_hash(payload)
        assert row.idempotency_key == (first.idempotency_key if kind == "duplicate" else row.idempotency_key)
        assert (row.idempotency_key == first.idempotency_key) == (kind == "duplicate")
        assert payload["body"]["body"] in row.payload_summary
        assert announced == [(first.pk, "worker-b",
                              f"{kind}: the committed effect already holds this {held}", EffectState.COMMITTED)]
        assert sandbox.counts()["requests"] == 1
