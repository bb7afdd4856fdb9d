"""Listens to the ledger: every effect change becomes an event in the same
transaction; a resolved unknown lets its item continue by itself."""

from django.db import transaction
from django.dispatch import receiver

from ledger.models import Effect
from ledger.signals import effect_changed
from ticketagent.eventlog.append import effect_snapshot, event_append
from ticketagent.services.items import item_continue

CONTINUE_ON = {"EFFECT_RECONCILED", "REVIEWED"}


@receiver(effect_changed, sender=Effect, dispatch_uid="ticketagent-effect-events")
def on_effect_changed(sender, effect, event, actor, note, from_state, **kwargs):
    try:
        task_id, item_id = int(effect.owner_task), int(effect.owner_item)
    except ValueError:
        return  # not one of ours
    payload = effect_snapshot(effect)
    payload["from_state"] = from_state
    if note:
        payload["note"] = note[:500]
    event_append(task_id=task_id, item_id=item_id, type=event, payload=payload, actor=actor)
    if event in CONTINUE_ON:
        transaction.on_commit(lambda: item_continue(item_id=item_id, actor=actor))
