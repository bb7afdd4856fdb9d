"""The gate's three calls in a row, each in a transaction of its own: for tests with no claim to check and no
recovery point to write beside them (the product's one caller is `ticketagent.pipeline.steps`)."""

import time
from dataclasses import dataclass

from django.db import transaction

from ledger.channels.base import Channel
from ledger.gate import effect_perform, intent_prepare, intent_record, outcome_record
from ledger.models import Effect

# a caller with no lease: its claim is known valid this long from the call (a test passes its own to check it)
DEADLINE_SECONDS = 3600


@dataclass(frozen=True)
class GateResult:
    """What `effect_run` did. `blocked`: "", "duplicate", "conflict", "expired" (the deadline came
    before the request could leave: nothing sent, the row still `intent`) or "not ours" (the row
    stopped being this caller's attempt while it called)."""

    effect: Effect
    state: str
    called: bool = False
    blocked: str = ""


def effect_run(*, action: str, payload: dict, owner_task: str, owner_item: str, owner_step: str, claim_token: str,
               authorized_by: str = "", channel: Channel | None = None, deadline: float | None = None) -> GateResult:
    """intent_record, effect_perform, outcome_record, each in a transaction of its own."""
    intent = intent_prepare(action=action, payload=payload, owner_task=owner_task, owner_item=owner_item,
                            owner_step=owner_step, claim_token=claim_token, authorized_by=authorized_by)
    with transaction.atomic():
        recorded = intent_record(intent)
    effect = recorded.effect
    if recorded.blocked:
        return GateResult(effect=effect, state=effect.state, blocked=recorded.blocked)
    deadline = time.monotonic() + DEADLINE_SECONDS if deadline is None else deadline
    result = effect_perform(intent, effect, deadline=deadline, channel=channel)
    if result is None:
        return GateResult(effect=effect, state=effect.state, blocked="expired")
    with transaction.atomic():
        ours = outcome_record(intent, effect, result)
    return GateResult(effect=effect, state=effect.state, called=True, blocked="" if ours else "not ours")
