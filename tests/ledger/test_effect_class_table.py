"""The effect-class table and the channel registry: every action names a
known channel and class, slots and approvals follow the class, and an
unknown action or channel is refused before anything is recorded or sent."""

import pytest

from ledger.actions import action_spec
from ledger.channels.base import CallDeadline, Channel
from ledger.models import Effect, EffectClass
from ticketagent.actions import ACTIONS
from ticketagent.channels.registry import get_channel

from .helpers import run_notify


class TestTheEffectClassTable:
    @pytest.mark.parametrize("name", sorted(ACTIONS))
    def test_each_action_names_a_known_channel_and_its_class_decides_slot_and_approval(self, name):
        spec = action_spec(name)
        assert isinstance(get_channel(spec.channel), Channel) and get_channel(spec.channel).name == spec.channel
        assert spec.slotted == (spec.effect_class in (EffectClass.ONCE, EffectClass.IRREVERSIBLE))
        assert spec.needs_approval == (spec.effect_class == EffectClass.IRREVERSIBLE)

    def test_an_unknown_action_is_refused_naming_the_known_ones(self):
        with pytest.raises(ValueError, match="unknown action 'send_gift'; known: close_ticket, escalate"):
            action_spec("send_gift")

    @pytest.mark.django_db(transaction=True)
    def test_an_unknown_action_reaches_neither_the_ledger_nor_the_helpdesk(self, sandbox):
        with pytest.raises(ValueError, match="unknown action"):
            run_notify(action="send_gift")
        assert Effect.objects.count() == 0
        assert sandbox.counts()["requests"] == 0

    def test_an_unknown_channel_is_refused(self):
        with pytest.raises(ValueError, match="unknown channel 'fax'"):
            get_channel("fax")

    def test_a_channel_without_an_adapter_cannot_act_and_cannot_tell(self):
        bare = Channel()
        with pytest.raises(NotImplementedError):
            bare.perform(action_spec("escalate"), {}, "k1", CallDeadline.within(60))
        answer = bare.lookup("k1", {})
        assert answer.found is None and "no look-up by key" in answer.detail
