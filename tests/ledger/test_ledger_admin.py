"""Ledger rows are evidence: the admin shows effects, their transitions and
blocked duplicates, and lets nobody add, change or delete them."""

import pytest
from django.urls import reverse

from ledger.models import BlockedDuplicate, EffectTransition

from .helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def effect(sandbox):
    first = run_notify()
    run_notify(claim_token="worker-b")  # a blocked duplicate
    return first.effect


class TestTheLedgerAdminIsReadOnly:
    def test_effects_are_listed_and_shown_with_their_transitions(self, client, staff, effect):
        client.force_login(staff)
        listing = client.get(reverse("admin:ledger_effect_changelist"))
        assert listing.status_code == 200 and "notify_customer" in listing.content.decode()
        page = client.get(reverse("admin:ledger_effect_change", args=[effect.pk])).content.decode()
        assert "notify_customer i1 [committed]" in page
        assert 'name="_save"' not in page
        assert "worker-a" in page  # the transitions' actor, inline

    @pytest.mark.parametrize("model", ["effect", "effecttransition", "blockedduplicate"])
    def test_nothing_can_be_added_changed_or_deleted(self, client, staff, effect, model):
        client.force_login(staff)
        pk = {"effect": effect.pk, "effecttransition": EffectTransition.objects.first().pk,
              "blockedduplicate": BlockedDuplicate.objects.get().pk}[model]
        assert client.get(reverse(f"admin:ledger_{model}_changelist")).status_code == 200
        assert client.get(reverse(f"admin:ledger_{model}_add")).status_code == 403
        assert client.post(reverse(f"admin:ledger_{model}_delete", args=[pk]), {"post": "yes"}).status_code == 403
        page = client.get(reverse(f"admin:ledger_{model}_change", args=[pk])).content.decode()
        assert 'name="_save"' not in page
