"""Fixtures for the dashboard tests: real rows made by the real services and
the real gate (against the sandbox helpdesk), never hand-written ledger rows."""

import pytest

from ledger.models import EffectState
from tests.gate_run import effect_run
from ticketagent.models import ItemStatus
from ticketagent.plan import effect_action

from ..factories import make_task

HTMX = {"HX-Request": "true"}


def notify_payload(item, body="Your refund is on its way.") -> dict:
    return {"ticket": item.ticket_id, "body": {"to": item.customer_email, "subject": f"Re: {item.subject}",
                                                "body": body}}


@pytest.fixture
def unknown_effect(sandbox):
    """make(task=None, channel="helpdesk", body=...) -> an `unknown` notify effect on an item
    waiting for review: the sandbox accepts the call, then drops the connection."""

    def make(task=None, *, channel="helpdesk", body="Your refund is on its way."):
        task = task or make_task(1, notify_channel=channel)
        item = task.items.order_by("row").first()
        sandbox.set_faults(drop_next={"email" if channel == "email" else "notify": 1})
        result = effect_run(action=effect_action("notify_customer", notify_channel=channel),
                            payload=notify_payload(item, body), owner_task=str(task.pk), owner_item=item.ref,
                            owner_step="notify_customer", claim_token="test-worker")
        assert result.state == EffectState.UNKNOWN, result.effect.last_error
        task.items.filter(pk=item.pk).update(status=ItemStatus.WAITING_REVIEW)
        return result.effect

    return make
