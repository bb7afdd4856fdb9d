"""Tasks, items, checkpoints and the append-only event log."""

import hashlib

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import Q
from django.db.models.functions import Upper

from ticketagent.channels.identity import helpdesk_label
from ticketagent.playbooks.models import Article, Playbook, PlaybookVersion, VersionStatus  # noqa: F401 - models


class TaskStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    SUSPENDED = "suspended", "suspended"
    NEEDS_REVIEW = "needs_review", "needs review"
    COMPLETED = "completed", "completed"
    CANCELLED = "cancelled", "cancelled"
    NEEDS_MIGRATION = "needs_migration", "needs migration"


ACTIVE_TASK_STATUSES = (TaskStatus.QUEUED, TaskStatus.RUNNING)
FINAL_TASK_STATUSES = (TaskStatus.COMPLETED, TaskStatus.CANCELLED, TaskStatus.NEEDS_MIGRATION)


class ItemStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    WAITING_REVIEW = "waiting_review", "waiting for review"
    WAITING_APPROVAL = "waiting_approval", "waiting for approval"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    SKIPPED = "skipped", "skipped"


ENDED_ITEM_STATUSES = (ItemStatus.DONE, ItemStatus.FAILED, ItemStatus.SKIPPED)
WAITING_ITEM_STATUSES = (ItemStatus.WAITING_REVIEW, ItemStatus.WAITING_APPROVAL)


class Approval(models.TextChoices):
    """A person's decision on the actions an item holds for approval (one decision covers them all)."""

    NONE = "", "not decided"
    APPROVED = "approved", "approved"
    # a rejection decides the item too: the rest runs without what was rejected (and what needs it,
    # `plan.after_rejection`), or the item stops there
    REJECTED = "rejected", "rejected, the rest done"
    STOPPED = "rejected_stop", "rejected, the item stopped"


class NotifyChannel(models.TextChoices):
    HELPDESK = "helpdesk", "helpdesk API"
    EMAIL = "email", "email (SMTP)"


class Task(models.Model):
    name = models.CharField(max_length=200)
    source_filename = models.CharField(max_length=255, blank=True)
    status = models.CharField(max_length=20, choices=TaskStatus.choices, default=TaskStatus.QUEUED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    allow_auto_close = models.BooleanField(default=False)
    notify_channel = models.CharField(max_length=16, choices=NotifyChannel.choices, default=NotifyChannel.HELPDESK)
    model_label = models.CharField(max_length=100, default="offline model")
    failure_threshold = models.PositiveIntegerField(default=3)
    consecutive_failures = models.PositiveIntegerField(default=0)
    status_reason = models.TextField(blank=True)
    # set when the task is suspended (the last item done before it): shown beside the suspension
    last_success_item = models.ForeignKey(
        "Item", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resume_count = models.PositiveIntegerField(default=0)
    # Items by state, written when the task completes: no item of a completed
    # task moves again, so the dashboard reads this instead of counting them.
    final_counts = models.JSONField(null=True, blank=True, editable=False)
    # of its done items, those with no committed effect (nothing drafted, sent or changed), written with final_counts
    final_nothing_sent = models.PositiveIntegerField(null=True, blank=True, editable=False)
    source_task = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    # the playbook version the task pins (its items may be moved to a newer one: Item.playbook_version)
    playbook_version = models.ForeignKey(PlaybookVersion, on_delete=models.PROTECT, related_name="tasks")
    # a rehearsal runs the model steps and the rules for real and no effect step at all
    rehearsal = models.BooleanField(default=False)
    # A budget for the task's model calls, in USD or in tokens (one, or none). What its calls cost is counted
    # here only for a task with a budget, in the phase of each model step (services/budget.py): a task
    # without one is summed from its events' usage instead (eventlog/usage.py), and its row stays unlocked.
    budget_usd = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    budget_tokens = models.BigIntegerField(null=True, blank=True)
    # The helpdesk the task acts on: the identity it reported (compared: a worker serving another takes none of
    # its items), with its kind and URL as configured where the task was created (shown). Null: not bound yet
    # (created before tasks were bound, or while the helpdesk did not answer): bound on a worker's first contact.
    helpdesk_id = models.CharField(max_length=300, null=True, blank=True)
    helpdesk_kind = models.CharField(max_length=16, blank=True)
    helpdesk_url = models.CharField(max_length=500, blank=True)
    spent_usd = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    spent_tokens = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "-id"], name="task_status_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(failure_threshold__gte=1), name="task_failure_threshold_positive"),
            # a budget is money or tokens, above zero
            models.CheckConstraint(condition=Q(budget_usd__isnull=True) | Q(budget_tokens__isnull=True),
                                   name="task_one_budget"),
            models.CheckConstraint(condition=Q(budget_usd__isnull=True) | Q(budget_usd__gt=0),
                                   name="task_budget_usd_positive"),
            models.CheckConstraint(condition=Q(budget_tokens__isnull=True) | Q(budget_tokens__gt=0),
                                   name="task_budget_tokens_positive"),
        ]

    def __str__(self):
        return f"task {self.pk} {self.name}"

    @property
    def helpdesk_label(self) -> str:
        if not self.helpdesk_id:
            return "not bound to a helpdesk yet"
        return helpdesk_label(self.helpdesk_kind, self.helpdesk_url, self.helpdesk_id)

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_TASK_STATUSES

    @property
    def has_budget(self) -> bool:
        return self.budget_usd is not None or self.budget_tokens is not None


class Item(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="items")
    row = models.PositiveIntegerField()
    ticket_id = models.CharField(max_length=64)
    customer_email = models.EmailField(max_length=254)
    customer_name = models.CharField(max_length=200, blank=True)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    priority = models.CharField(max_length=16, default="normal")
    language = models.CharField(max_length=16, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # expected labels from the file (expected_category, _priority, _actions): a rehearsal's agreement
    expected = models.JSONField(default=dict, blank=True)
    playbook_version = models.ForeignKey(PlaybookVersion, on_delete=models.PROTECT, related_name="+")

    status = models.CharField(max_length=20, choices=ItemStatus.choices, default=ItemStatus.QUEUED)
    # Bumped whenever the item is handed to the queue again; part of the job id.
    attempt = models.PositiveIntegerField(default=1)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # What this lease's model calls in flight reserved of its task's budget (pipeline/budget.py): counted only
    # while the lease is live, made 0 when the step's phase counts what the calls cost or a new lease starts.
    reserved_usd = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    reserved_tokens = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True)
    failure_kind = models.CharField(max_length=32, blank=True)
    # A re-run of an item from another task (new task from unfinished items):
    # effects the origin already initiated are not initiated again.
    origin = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    approval = models.CharField(max_length=16, blank=True, choices=Approval.choices, default=Approval.NONE)
    approval_by = models.CharField(max_length=150, blank=True)
    approval_reason = models.TextField(blank=True)
    approval_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["task_id", "row"]
        constraints = [
            models.UniqueConstraint(fields=["task", "ticket_id"], name="item_ticket_unique_in_task"),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="item_attempt_positive"),
        ]
        indexes = [
            models.Index(fields=["task", "status"], name="item_task_status_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="item_lease_idx"),
            models.Index(fields=["task", "finished_at"], name="item_task_finished_idx"),
            # a task's items in upload order, a page at a time (task detail)
            models.Index(fields=["task", "row"], name="item_task_row_idx"),
            # a task's window (ticketagent/scheduling/window.py): its queued items not yet sent to Redis, oldest
            # first, and those sent — both found without reading every queued item of a 50,000-item task
            models.Index(fields=["task", "id"], name="item_waiting_idx",
                         condition=Q(status="queued", enqueued_at__isnull=True)),
            models.Index(fields=["task"], name="item_sent_idx",
                         condition=Q(status="queued", enqueued_at__isnull=False)),
            # search across tasks: by ticket id, by customer email (case-insensitive)
            models.Index(fields=["ticket_id"], name="item_ticket_idx"),
            models.Index(Upper("customer_email"), name="item_customer_email_idx"),
            # ... and by any part of a ticket id, an email (a domain) or a subject: `icontains` is
            # UPPER(col) LIKE UPPER('%part%'), which a trigram index on UPPER(col) answers (pg_trgm, 0018)
            GinIndex(OpClass(Upper("ticket_id"), name="gin_trgm_ops"), name="item_ticket_trgm_idx"),
            GinIndex(OpClass(Upper("customer_email"), name="gin_trgm_ops"), name="item_email_trgm_idx"),
            GinIndex(OpClass(Upper("subject"), name="gin_trgm_ops"), name="item_subject_trgm_idx"),
        ]

    def __str__(self):
        return f"item {self.pk} ({self.ticket_id})"

    @property
    def ref(self) -> str:
        """The opaque owner reference the ledger stores."""
        return str(self.pk)

    LEASE_FIELDS = ("lease_token", "lease_owner", "lease_expires_at")

    def lease_clear(self) -> None:
        """The one place a lease ends: no token, no owner, no deadline (the caller saves `LEASE_FIELDS`)."""
        self.lease_token = self.lease_owner = ""
        self.lease_expires_at = None

    def input_hash(self) -> str:
        fields = [self.ticket_id, self.customer_email, self.customer_name, self.subject, self.body,
                  self.priority, self.language]
        return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()


class Checkpoint(models.Model):
    """An item's recovery contract (plus its effects in the ledger)."""

    item = models.OneToOneField(Item, on_delete=models.CASCADE, related_name="checkpoint")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    plan_version = models.PositiveIntegerField()
    # the playbook version the outputs were computed under (with plan_version: what the item runs on)
    playbook_version = models.ForeignKey(PlaybookVersion, on_delete=models.PROTECT, related_name="+")
    schema_version = models.PositiveIntegerField()
    cursor = models.PositiveIntegerField(default=0)
    input_hash = models.CharField(max_length=64)
    step_outputs = models.JSONField(default=dict)
    retry_count = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def snapshot(self) -> dict:
        return {
            "task_id": self.task_id, "plan_version": self.plan_version, "playbook_version": self.playbook_version_id,
            "schema_version": self.schema_version,
            "cursor": self.cursor, "input_hash": self.input_hash, "step_outputs": self.step_outputs,
            "retry_count": self.retry_count,
        }


class EventType(models.TextChoices):
    TASK_CREATED = "TASK_CREATED"
    PLANNED = "PLANNED"
    ITEM_STARTED = "ITEM_STARTED"
    STEP_DONE = "STEP_DONE"
    STEP_SKIPPED = "STEP_SKIPPED"  # an effect step the decision did not choose: recorded, never run
    TOOL_CALL = "TOOL_CALL"
    ITEM_DONE = "ITEM_DONE"
    ITEM_FAILED = "ITEM_FAILED"
    ITEM_WAITING = "ITEM_WAITING"
    ITEM_REQUEUED = "ITEM_REQUEUED"
    ITEM_STOPPED = "ITEM_STOPPED"  # handed back (queued) because its task was paused or suspended
    ITEM_SKIPPED = "ITEM_SKIPPED"  # will not run: its task was cancelled, or an operator skipped it
    RECOVERED = "RECOVERED"
    EFFECT_INTENT = "EFFECT_INTENT"
    EFFECT_RETRY = "EFFECT_RETRY"
    EFFECT_COMMITTED = "EFFECT_COMMITTED"
    EFFECT_FAILED = "EFFECT_FAILED"
    EFFECT_UNKNOWN = "EFFECT_UNKNOWN"
    EFFECT_BLOCKED = "EFFECT_BLOCKED"
    EFFECT_FENCED = "EFFECT_FENCED"
    EFFECT_RECONCILED = "EFFECT_RECONCILED"
    EFFECT_RECONCILE_UNANSWERED = "EFFECT_RECONCILE_UNANSWERED"
    REVIEWED = "REVIEWED"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    SUSPENDED = "SUSPENDED"
    RESUMED = "RESUMED"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    TASK_STATUS = "TASK_STATUS"
    NEEDS_MIGRATION = "NEEDS_MIGRATION"
    PLAN_CARRIED = "PLAN_CARRIED"  # a go-live item starts from its rehearsal's reviewed step outputs
    PLAN_RECOMPUTED = "PLAN_RECOMPUTED"  # a go-live item whose ticket changed since the rehearsal: decided again
    ITEM_MOVED = "ITEM_MOVED"  # moved to another playbook version: its model steps recompute there
    HELPDESK_BOUND = "HELPDESK_BOUND"  # a task created unbound, bound to the helpdesk of a worker's first contact


class AppendOnlyError(Exception):
    pass


class EventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("events are append-only")

    def delete(self):
        raise AppendOnlyError("events are append-only")


# The task events that are decisions by people or by reconcile (the review
# page's audit trail, with the ledger's verdict transitions): the condition
# of a partial index, so the page reads only those rows, newest first.
AUDIT_EVENTS = (Q(type__in=(EventType.REVIEWED, EventType.EFFECT_RECONCILED, EventType.APPROVED,
                            EventType.REJECTED))
                | Q(type=EventType.ITEM_SKIPPED, payload__was=ItemStatus.FAILED)
                | Q(type=EventType.ITEM_REQUEUED, payload__why__startswith="retried by an operator"))


# The events that carry a model step's usage (tokens, cost): the condition of two partial indexes.
USAGE_EVENTS = Q(type=EventType.STEP_DONE, payload__has_key="usage")


class Event(models.Model):
    """One append-only record of something that happened, written in the
    transaction of the state change it records."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    item = models.ForeignKey(Item, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=32, choices=EventType.choices)
    payload = models.JSONField(default=dict)
    actor = models.CharField(max_length=150, blank=True)
    timestamp = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["task", "id"], name="event_task_idx"),
            models.Index(fields=["type"], name="event_type_idx"),
            # since an effect's verdicts live in the ledger's transitions only, these rows are rare: without
            # it the audit trail read the whole log backwards looking for 30 of them
            models.Index(fields=["-id"], condition=AUDIT_EVENTS, name="event_audit_idx"),
            # the model steps' usage (eventlog/usage.py): a task's, and a day's, without reading its other events
            models.Index(fields=["task"], condition=USAGE_EVENTS, name="event_usage_task_idx"),
            models.Index(fields=["timestamp"], condition=USAGE_EVENTS, name="event_usage_time_idx"),
        ]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError("events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("events are append-only")


class Blob(models.Model):
    """Big outputs, stored once by content hash and referenced from events."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)


class ApiOutage(models.Model):
    """A time an outside API was down (`governor.Governor`: from its first unanswered call past the retries to
    the first answer), kept so that a task's pace counts only the time it could run (`web.pace`). Redis holds
    the outage while it lasts; this row is its record."""

    what = models.CharField(max_length=40)  # "the model API", "the helpdesk": as the governor names it
    endpoint = models.CharField(max_length=500)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)  # None while it lasts

    class Meta:
        indexes = [models.Index(fields=["what", "started_at"], name="outage_started_idx")]

    def __str__(self):
        return f"{self.what} down since {self.started_at:%Y-%m-%d %H:%M:%S}"
