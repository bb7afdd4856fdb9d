"""Reads for operations: the workers and the queue (rq's registry and the items' leases), search, an item's history."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace

from django.conf import settings
from django.db.models import Case, Count, Q, Value, When
from django.utils import timezone
from rq import Worker

from ledger.models import Effect, EffectTransition
from ticketagent.eventlog.merged import merge, transition_payload
from ticketagent.llm.offline import OfflineModel
from ticketagent.llm.offline import writes as offline_writes
from ticketagent.models import ACTIVE_TASK_STATUSES, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import (
    EFFECT_STEPS,
    REPLY_ACTIONS,
    held_for_approval,
    not_chosen,
    rejection_outcome,
    step_name,
)
from ticketagent.playbooks.checks import reply_language
from ticketagent.playbooks.services import published_spec
from ticketagent.scheduling import jobs
from ticketagent.scheduling.recovery import JOB_MISSING, JOB_STUCK
from ticketagent.scheduling.rqworker import is_alive, seconds_since_seen
from ticketagent.scheduling.sweep import sweep_holder
from ticketagent.words import event_words

log = logging.getLogger(__name__)

# A worker says it is alive every HEARTBEAT_SECONDS (the Redis server's clock, whole seconds): silent for two beats
# and the second's rounding, it is late -- stalled, paused, killed or cut off -- long before it counts as dead
# (silent for a lease time, when its leases expire).
def late_after() -> float:
    return 2 * settings.HEARTBEAT_SECONDS + 1


# `manage.py worker` writes its kind into rq's hash; a worker of an older release only into its default name
WORKER_KINDS = {"inproc": "in-process", "fork": "forking"}


@dataclass
class WorkerRow:
    name: str
    host: str
    pid: int | None
    kind: str
    state: str
    last_heartbeat: object
    born: object
    seen_ago: float | None = None  # seconds since the process last said it was alive (the Redis server's clock)
    threads: int = 1  # items it may run at once (WORKER_THREADS; a forking worker: 1)
    items: list[Item] = field(default_factory=list)  # the items it holds: running under its lease (the database's)
    helpdesk: str = ""  # the identity of the helpdesk it serves (as that helpdesk reports it; "": not said)
    helpdesk_label: str = ""
    sweeps: bool = False  # it holds the recovery sweep (ticketagent/scheduling/sweep.py), as the database says
    not_served: list[Task] = field(default_factory=list)  # active tasks bound to another helpdesk: none of theirs

    @property
    def shown_items(self) -> list[Item]:
        return self.items[:5]

    @property
    def more_items(self) -> int:
        return max(0, len(self.items) - 5)

    @property
    def last_seen(self):
        """The one time the page shows: its own sign of life, or rq's heartbeat for a worker that gives none."""
        if self.seen_ago is None:
            return self.last_heartbeat
        return timezone.now() - timedelta(seconds=self.seen_ago)


@dataclass
class Operations:
    workers: list[WorkerRow] = field(default_factory=list)
    redis_error: str = ""
    queue_length: int | None = None
    started_jobs: int | None = None
    failed_jobs: int | None = None
    depth: list[dict] = field(default_factory=list)
    running: list[Item] = field(default_factory=list)
    recoveries: list[Event] = field(default_factory=list)


def _worker_kind(written: bytes | None, name: str) -> str:
    if written:
        return written.decode()
    return WORKER_KINDS.get(name.split("-", 1)[0], "unknown (started outside manage.py worker)")


def _state(worker: Worker, seen_ago: float | None) -> str:
    """dead: silent for a lease time (killed, paused or cut off; its leases have expired; rq's key lives on);
    late: silent for longer than its heartbeat (what rq last wrote, "busy", is no longer known); else rq's."""
    if not is_alive(seen_ago):
        return "dead"
    if seen_ago is not None and seen_ago > late_after():
        return "late"
    return worker.get_state()


def _rq_workers(ops: Operations) -> None:
    """Fill the workers and queue counts from rq's registry."""
    queues = jobs.queues_in_use()  # the shared queue and each helpdesk's
    queue = queues[0]
    ops.queue_length = sum(q.count for q in queues)
    ops.started_jobs = sum(q.started_job_registry.count for q in queues)
    ops.failed_jobs = sum(q.failed_job_registry.count for q in queues)
    registered = Worker.all(queue=queue)
    seen = seconds_since_seen(queue.connection, [w.key for w in registered])
    sweeping = sweep_holder()
    for worker, seen_ago in zip(registered, seen, strict=True):
        threads, kind, helpdesk, label = worker.connection.hmget(worker.key, "threads", "kind", "helpdesk",
                                                                 "helpdesk_label")
        ops.workers.append(WorkerRow(
            name=worker.name, host=worker.hostname or "?", pid=worker.pid, kind=_worker_kind(kind, worker.name),
            state=_state(worker, seen_ago), seen_ago=seen_ago,
            last_heartbeat=worker.last_heartbeat, born=worker.birth_date,
            threads=int(threads) if threads and threads.isdigit() else 1,
            helpdesk=helpdesk.decode() if helpdesk else "", helpdesk_label=label.decode() if label else "",
            sweeps=f"{worker.hostname}:{worker.pid}" == sweeping))


def operations_overview() -> Operations:
    """Workers (rq's registry), the queue's depth per task, running items' leases, and recent recoveries."""
    ops = Operations()
    try:
        _rq_workers(ops)
    except Exception as exc:  # noqa: BLE001 - Redis down: the database's side is still shown
        log.warning("workers page: rq registry unavailable: %s", exc)
        ops.redis_error = f"Redis does not answer ({type(exc).__name__}): the workers cannot be listed"
    now = timezone.now()
    ops.running = list(Item.objects.filter(status=ItemStatus.RUNNING).select_related("task")
                       .only("id", "ticket_id", "task__id", "task__name", "lease_owner", "lease_expires_at", "attempt")
                       .order_by("lease_expires_at")[:200])
    by_process: dict[str, list[Item]] = {}
    for item in ops.running:
        item.expired = bool(item.lease_expires_at and item.lease_expires_at < now)
        if not item.expired:  # a lease owner is host:pid:random (pipeline.lease.worker_name)
            by_process.setdefault(":".join((item.lease_owner or "").split(":")[:2]), []).append(item)
    bound = list(Task.objects.filter(status__in=ACTIVE_TASK_STATUSES, rehearsal=False, helpdesk_id__isnull=False)
                 .only("id", "name", "helpdesk_id", "helpdesk_kind", "helpdesk_url").order_by("pk")[:50])
    for worker in ops.workers:
        worker.items = [] if worker.state == "dead" else by_process.get(f"{worker.host}:{worker.pid}", [])
        worker.not_served = [task for task in bound if worker.helpdesk and task.helpdesk_id != worker.helpdesk]
    ops.workers.sort(key=lambda w: (w.host, w.pid or 0))
    ops.depth = list(Item.objects.filter(status=ItemStatus.QUEUED).exclude(task__status__in=(
        TaskStatus.CANCELLED, TaskStatus.COMPLETED)).values("task_id", "task__name", "task__status")
        .annotate(n=Count("*"), sent=Count("pk", filter=Q(enqueued_at__isnull=False))).order_by("task_id"))
    for row in ops.depth:
        row["runs"] = row["task__status"] in ACTIVE_TASK_STATUSES
    ops.recoveries = recent_recoveries()
    return ops


def recent_recoveries(n: int = 20) -> list[Event]:
    """The sweep's (or a worker's) take-overs of expired leases, each with what followed: the item's requeue; and
    the jobs it sent again because no worker could run them any more (lost before their item started)."""
    recovered = list(Event.objects.filter(Q(type=EventType.RECOVERED) | Q(
        type=EventType.ITEM_REQUEUED, actor="recovery", payload__why__in=(JOB_MISSING, JOB_STUCK)))
                     .select_related("item")
                     .only("id", "type", "payload", "actor", "timestamp", "task_id", "item__id", "item__ticket_id")
                     .order_by("-id")[:n])
    for r in recovered:
        r.job_lost = r.type == EventType.ITEM_REQUEUED
    recovered_leases = [r for r in recovered if not r.job_lost]
    after: dict[int, Event] = {}
    if recovered_leases:
        for ev in Event.objects.filter(type=EventType.ITEM_REQUEUED, item__in=[r.item_id for r in recovered_leases],
                                       id__gt=min(r.id for r in recovered_leases)).order_by("id"):
            for r in recovered_leases:
                if r.item_id == ev.item_id and ev.id > r.id and r.id not in after:
                    after[r.id] = ev
    for r in recovered:
        r.requeue = after.get(r.id)
    return recovered


SEARCH_LIMIT = 100


def search(query: str) -> tuple[list[Item], list[Task]]:
    """Items whose ticket id, customer email (so its domain) or subject contains the query, case-insensitive,
    exact ids and emails first; tasks by name (any part) or number. The parts are found by the trigram indexes
    (`Item.Meta.indexes`)."""
    query = query.replace("\x00", "").strip()[:254]  # PostgreSQL refuses NUL in text
    if not query:
        return [], []
    exact = Q(ticket_id=query) | Q(customer_email__iexact=query)
    items = list(Item.objects.filter(exact | Q(ticket_id__icontains=query) | Q(customer_email__icontains=query)
                                     | Q(subject__icontains=query))
                 .annotate(inexact=Case(When(exact, then=Value(0)), default=Value(1)))
                 .select_related("task").order_by("inexact", "-task_id", "row")[:SEARCH_LIMIT])
    number = query.lstrip("#")
    by_name = Q(name__icontains=query)
    if number.isascii() and number.isdigit() and len(number) <= 18:  # a task's number (and never past a bigint)
        by_name |= Q(pk=int(number))
    tasks = list(Task.objects.filter(by_name).order_by("-id")[:SEARCH_LIMIT])
    return items, tasks


def item_history(item: Item) -> tuple[list, list[Effect]]:
    """Every entry of the item's log in order (steps, attempts, effects, verdicts) -- its events merged with
    its effects' transitions, as an export merges them -- and its effects with their transitions."""
    events = list(Event.objects.filter(item=item).order_by("id")[:1000])
    for ev in events:
        ev.words = event_words(ev.type)
        if ev.type == EventType.ITEM_STARTED:
            ev.words = f"attempt {ev.payload.get('attempt', '?')} started at step {step_name(ev.payload.get('cursor'))}"
    effects = list(Effect.objects.filter(owner_item=item.ref).order_by("id"))
    transitions: dict[int, list[EffectTransition]] = {}
    for t in EffectTransition.objects.filter(effect__in=effects).order_by("id"):
        transitions.setdefault(t.effect_id, []).append(t)
    for effect in effects:
        effect.history = transitions.get(effect.pk, [])
    return merged_history(events, [t for e in effects for t in e.history]), effects


def merged_history(events: list[Event], transitions: list[EffectTransition]) -> list:
    """Events and the transitions that carry their row (older ones were copied into the events), in the
    export's order (`eventlog.merged.merge`: by time, the event first at the same instant)."""
    entries = []
    for t in sorted(transitions, key=lambda t: t.pk):
        if t.snapshot:
            entries.append((t.at, t.pk, SimpleNamespace(
                type=t.event, timestamp=t.at, actor=t.actor,
                payload=transition_payload(t.snapshot, t.from_state, t.note),
                words=event_words(t.event))))
    return list(merge(((ev.timestamp, ev.pk, ev) for ev in events), entries))[:2000]


def offline_language_gap(item: Item, checkpoint, served: dict) -> dict | None:
    """When the offline model drafted the reply and cannot write the language it should be in (it drafts in English):
    {"language": that language, "held": whether the reply checks' language check held the draft for a person}."""
    outputs = checkpoint.step_outputs if checkpoint else {}
    if served.get("draft") != OfflineModel.label or not outputs.get("draft"):
        return None
    spec = published_spec(checkpoint.playbook_version)
    wanted = reply_language(spec, ticket={"language": item.language}, triage=outputs.get("triage") or {})
    if not wanted or offline_writes(wanted):
        return None
    checks = (outputs.get("decide") or {}).get("checks") or []
    return {"language": wanted, "held": any(c.get("check") == "wrong_language" for c in checks)}


def item_decision(item: Item, checkpoint) -> dict | None:
    """What the agent decided for an item, as a person reads it: the triage, the draft (with the articles
    it used), the actions that run and why, what the rules changed, what waits for approval, the failed
    reply checks, the effect steps that were not run (step -> why: rejected, skipped by review, ...), and
    while actions are held what a rejection would do (`rejection`: `reply` when a held action carries the
    reply, the steps to come that "do the rest" `runs`, and those it does `not_run`, with why). None before
    the first model step."""
    outputs = checkpoint.step_outputs if checkpoint else {}
    if not outputs.get("triage"):
        return None
    decide = outputs.get("decide") or {}
    held = held_for_approval(decide, allow_auto_close=item.task.allow_auto_close)
    not_run = {step: output["skipped"] for step, output in outputs.items() if step in EFFECT_STEPS
               and isinstance(output, dict) and output.get("skipped") and not not_chosen(output)}
    rejection = None
    if held and item.status == ItemStatus.WAITING_APPROVAL:
        runs, skipped = rejection_outcome(outputs, held, cursor=checkpoint.cursor)
        rejection = {"reply": any(action in REPLY_ACTIONS for action in held), "runs": runs, "not_run": skipped}
    return {"triage": outputs.get("triage"), "draft": outputs.get("draft"), "decide": decide, "held": held,
            "not_run": not_run, "rejection": rejection}
