"""Listens to the ledger: a change that is no transition (a blocked or fenced
intent) becomes an event in the same transaction; a transition is not copied
(its row in the ledger's transition log is the record, which export and
replay merge with the task's events); a resolved unknown lets its item
continue by itself."""

from django.db import transaction
from django.dispatch import receiver

from ledger.models import Effect
from ledger.signals import effect_changed
from ticketagent.eventlog.append import event_append
from ticketagent.services.items import item_continue

CONTINUE_ON = {"EFFECT_RECONCILED", "REVIEWED"}


@receiver(effect_changed, sender=Effect, dispatch_uid="ticketagent-effect-events")
def on_effect_changed(sender, effect, event, actor, note, from_state, recorded=False, **kwargs):
    try:
        task_id, item_id = int(effect.owner_task), int(effect.owner_item)
    except ValueError:
        return  # not one of ours
    if not recorded:
        payload = effect.snapshot()
        payload["from_state"] = from_state
        if note:
            payload["note"] = note[:500]
        event_append(task_id=task_id, item_id=item_id, type=event, payload=payload, actor=actor)
    if event in CONTINUE_ON:
        transaction.on_commit(lambda: item_continue(item_id=item_id, actor=actor))
