"""What phase 1 records (the Intent) and what the gate returns (GateResult)
are values: built once, never changed -- phase 2 and the caller see exactly
what the intent recorded. The key is the same for the same intent and new
for changed content; the slot does not depend on the payload."""

import dataclasses
import hashlib

import pytest

from ledger.actions import action_spec
from ledger.keys import Intent, payload_hash
from ledger.models import Effect
from tests.gate_run import GateResult

from .helpers import NOTIFY


def build(payload=NOTIFY, action="notify_customer") -> Intent:
    return Intent.build(spec=action_spec(action), payload=payload, owner_task="t1", owner_item="i1",
                        owner_step="notify_customer", claim_token="worker-a", authorized_by="")


class TestGateValues:
    def test_an_intent_cannot_be_changed(self):
        intent = build()
        with pytest.raises(dataclasses.FrozenInstanceError):
            intent.key = "another key"

    def test_a_result_cannot_be_changed(self):
        result = GateResult(effect=Effect(), state="committed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.state = "failed"
        assert (result.called, result.blocked) == (False, "")

    def test_same_intent_same_key_changed_content_new_key_same_slot(self):
        regenerated = {**NOTIFY, "body": {**NOTIFY["body"], "body": "regenerated"}}
        assert build().key == build().key != build(regenerated).key
        assert build().slot == build(regenerated).slot == "t1/i1/notify_customer/notify_customer"
        assert build(action="save_draft").slot is None

    def test_the_key_is_the_sha256_of_the_owner_and_the_canonical_utf8_json(self):
        """Keys must not change across deploys: a re-run after an upgrade must
        find the row its intent made before. So the payload's hash is fixed:
        keys sorted, no spaces, UTF-8 as it is (not \\u escapes)."""
        payload = {"ticket": "T-1", "body": {"to": "ann@example.com", "subject": "Re: remboursement",
                                             "body": "Votre remboursement est en route — merci."}}
        canonical = ('{"body":{"body":"Votre remboursement est en route — merci.","subject":"Re: remboursement",'
                     '"to":"ann@example.com"},"ticket":"T-1"}')
        p_hash = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        owner = "\x1f".join(("t1", "i1", "notify_customer", "notify_customer", p_hash))
        assert payload_hash(payload) == p_hash
        assert build(payload).key == hashlib.sha256(owner.encode()).hexdigest()

    def test_the_order_of_the_payloads_fields_does_not_change_the_key(self):
        reordered = {"body": dict(reversed(list(NOTIFY["body"].items()))), "ticket": NOTIFY["ticket"]}
        assert list(reordered) != list(NOTIFY) and reordered == NOTIFY
        assert build(reordered).key == build().key
