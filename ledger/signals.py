"""Signals the ledger sends inside the transaction of each state change.

The owning app listens to refer to the change from its own event log (same
transaction; a transition is not copied, its row is the record) and to
continue its work after a resolution (on commit).
"""

from django.dispatch import Signal

# Sent inside the transaction that changed an effect.
# kwargs: effect (the row after the change), event (EFFECT_* / REVIEWED name),
# actor (str), note (str), from_state (str), recorded (bool: the change has
# its row in the ledger's transition log, its one audit record; False or
# absent for an event that is no state change: EFFECT_BLOCKED, EFFECT_FENCED).
effect_changed = Signal()
