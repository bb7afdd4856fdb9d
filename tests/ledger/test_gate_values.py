"""What phase 1 records (the Intent) and what the gate returns (GateResult)
are values: built once, never changed -- phase 2 and the caller see exactly
what the intent recorded. The key is the same for the same intent and new
for changed content; the slot does not depend on the payload."""

import dataclasses

import pytest

from ledger.actions import action_spec
from ledger.gate import GateResult, Intent
from ledger.models import Effect

from .helpers import NOTIFY


def build(payload=NOTIFY, action="notify_customer") -> Intent:
    return Intent.build(spec=action_spec(action), payload=payload, owner_task="t1", owner_item="i1",
                        owner_step="notify_customer", lease_token="worker-a", authorized_by="")


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
