"""Signals the ledger sends inside the transaction of each state change.

The owning app listens to record the change in its own event log (same
transaction) and to continue its work after a resolution (on commit).
"""

from django.dispatch import Signal

# Sent inside the transaction that changed an effect.
# kwargs: effect (the row after the change), event (EFFECT_* / REVIEWED name),
# actor (str), note (str), from_state (str).
effect_changed = Signal()
