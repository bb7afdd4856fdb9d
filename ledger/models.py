"""The effect ledger: one row per call that changes the outside world.

The ledger knows nothing about tickets. Owners are opaque strings
(`owner_task`, `owner_item`, `owner_step`) chosen by the calling app.
The correctness argument lives in two database constraints:

* `idempotency_key` is unique: the same intent can be initiated once;
* `slot` is unique for `once` and `irreversible` effects: whatever the
  payload, a given (item, step, effect type) acts at most once, so a
  regenerated draft cannot become a second email.
"""

from django.db import models
from django.db.models import Q


class EffectClass(models.TextChoices):
    RECOMPUTE = "recompute", "recompute"
    OVERWRITE = "overwrite", "overwrite"
    ONCE = "once", "once"
    IRREVERSIBLE = "irreversible", "irreversible"


class EffectState(models.TextChoices):
    INTENT = "intent", "intent"
    COMMITTED = "committed", "committed"
    FAILED = "failed", "failed"
    UNKNOWN = "unknown", "unknown"
    SKIPPED = "skipped", "skipped"


class ResolvedBy(models.TextChoices):
    NONE = "", "—"
    RECONCILE = "reconcile", "reconcile"
    REVIEW = "review", "review"


class Verdict(models.TextChoices):
    NONE = "", "—"
    HAPPENED = "happened", "happened"
    NOT_HAPPENED = "not_happened", "did not happen — retry"
    SKIP = "skip", "skip"


SLOTTED_CLASSES = (EffectClass.ONCE, EffectClass.IRREVERSIBLE)


class Effect(models.Model):
    idempotency_key = models.CharField(max_length=64, unique=True)
    slot = models.CharField(max_length=300, null=True, blank=True)
    action = models.CharField(max_length=64)
    effect_class = models.CharField(max_length=16, choices=EffectClass.choices)
    channel = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=EffectState.choices, default=EffectState.INTENT)
    attempts = models.PositiveIntegerField(default=1)

    owner_task = models.CharField(max_length=64, db_index=True)
    owner_item = models.CharField(max_length=64, db_index=True)
    owner_step = models.CharField(max_length=64)
    # The claim token of the owner's current attempt (the pipeline passes its
    # lease token): an outcome reported under any other token is refused.
    claim_token = models.CharField(max_length=64, blank=True)

    payload = models.JSONField()
    payload_hash = models.CharField(max_length=64)
    payload_summary = models.CharField(max_length=300, blank=True)
    external_ref = models.CharField(max_length=200, blank=True)
    last_error = models.TextField(blank=True)
    authorized_by = models.CharField(max_length=150, blank=True)

    resolved_by = models.CharField(max_length=16, choices=ResolvedBy.choices, blank=True, default="")
    verdict = models.CharField(max_length=16, choices=Verdict.choices, blank=True, default="")
    reviewed_by = models.CharField(max_length=150, blank=True)
    review_reason = models.TextField(blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    last_reconcile = models.CharField(max_length=300, blank=True)
    reconciled_at = models.DateTimeField(null=True, blank=True)

    # Evidence about the current attempt's call, for a person giving a verdict:
    # when its outcome was recorded (null: never -- the caller died between
    # intent and outcome) and whether the system answered at all (a status
    # line came back; null when no outcome was recorded). An unanswered call
    # may still have landed; an answered one cannot land later.
    outcome_at = models.DateTimeField(null=True, blank=True)
    answered = models.BooleanField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    # When the current attempt's intent was recorded: reconcile waits until
    # the call it guards can no longer be in flight.
    intent_at = models.DateTimeField()
    # When a look-up's "not found" can be trusted for an unknown outcome
    # (PostgreSQL's clock): no earlier caller can still be calling, and a
    # request it sent can no longer land (ledger.services.reconcile_not_before).
    settle_after = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slot"],
                condition=Q(effect_class__in=SLOTTED_CLASSES),
                name="ledger_effect_one_per_slot",
            ),
            models.CheckConstraint(
                condition=~Q(effect_class__in=SLOTTED_CLASSES) | Q(slot__isnull=False),
                name="ledger_effect_slotted_has_slot",
            ),
            models.CheckConstraint(
                condition=Q(state__in=EffectState.values), name="ledger_effect_state_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "intent_at"], name="ledger_effect_state_idx"),
            models.Index(fields=["owner_task", "state"], name="ledger_effect_task_state_idx"),
        ]

    def __str__(self):
        return f"{self.action} {self.owner_item} [{self.state}]"

    def snapshot(self) -> dict:
        """What a transition records of the row after it: enough to rebuild the row from the log."""
        return {
            "effect_id": self.pk, "key": self.idempotency_key, "slot": self.slot, "action": self.action,
            "effect_class": self.effect_class, "channel": self.channel, "state": self.state,
            "attempts": self.attempts, "step": self.owner_step, "payload_hash": self.payload_hash,
            "external_ref": self.external_ref, "resolved_by": self.resolved_by, "verdict": self.verdict,
            "reviewed_by": self.reviewed_by,
        }


class EffectTransition(models.Model):
    """Every state change of an effect, in the transaction that made it: the
    one audit record of the change (an owner's own log refers to these rows
    instead of copying them; `snapshot` is the row after the change)."""

    effect = models.ForeignKey(Effect, on_delete=models.CASCADE, related_name="transitions")
    # what made it: EFFECT_INTENT, EFFECT_COMMITTED, REVIEWED, EFFECT_RECONCILED, ... (the signal's event)
    event = models.CharField(max_length=40, blank=True)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor = models.CharField(max_length=150, blank=True)
    note = models.TextField(blank=True)
    # Effect.snapshot() after the change ({} in rows written before it was kept)
    snapshot = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["event", "-id"], name="ledger_transition_event_idx")]


class BlockedDuplicate(models.Model):
    """An intent the gate refused because its key or slot was already taken."""

    class Kind(models.TextChoices):
        DUPLICATE = "duplicate", "duplicate (same key)"
        CONFLICT = "conflict", "conflict (same slot, other payload)"

    effect = models.ForeignKey(Effect, on_delete=models.CASCADE, related_name="blocked")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    idempotency_key = models.CharField(max_length=64)
    payload_hash = models.CharField(max_length=64)
    payload_summary = models.CharField(max_length=300, blank=True)
    owner_task = models.CharField(max_length=64, db_index=True)
    owner_item = models.CharField(max_length=64)
    owner_step = models.CharField(max_length=64)
    claim_token = models.CharField(max_length=64, blank=True)
    existing_state = models.CharField(max_length=16)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

