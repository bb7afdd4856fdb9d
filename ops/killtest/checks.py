"""The kill test's verdict: what the sandbox received, per effect key, against the ledger."""

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from django.utils import timezone

from ledger.models import BlockedDuplicate, Effect, EffectState, EffectTransition
from ledger.services import effect_review, reconcile_not_before
from ops.killtest.report import Report
from sandbox.client import SandboxClient
from ticketagent.models import Event, EventType, ItemStatus, Task


def all_deliveries(sandbox: SandboxClient) -> Counter:
    return Counter(d["key"] for d in sandbox.deliveries(limit=1_000_000) if d.get("key"))


def check_deliveries(effects: dict, deliveries: Counter, report: Report, where: str) -> None:
    for key, n in deliveries.items():
        effect = effects.get(key)
        if effect is None:
            report.problems.append(f"{where}: delivery with key {key[:12]} has no ledger row")
            continue
        if n > 1 and effect.effect_class in ("once", "irreversible"):
            report.duplicates += n - 1
            report.duplicate_keys[key] = (effect.owner_task, n - 1)
            report.problems.append(f"{where}: {effect.action} for item {effect.owner_item} delivered {n} times")
        if effect.state != EffectState.COMMITTED:
            report.problems.append(f"{where}: {effect.action} item {effect.owner_item} was delivered but the "
                                   f"ledger says {effect.state}")


def check_run(task_ids: list[int], sandbox: SandboxClient, report: Report) -> None:
    """At the end: deliveries that arrived after their round was checked must
    still match the ledger."""
    effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task__in=[str(t) for t in task_ids])}
    deliveries = all_deliveries(sandbox)
    final = Report()
    check_deliveries(effects, deliveries, final, "whole run")
    seen = {p.split(": ", 1)[1] for p in report.problems}
    report.problems += [p for p in final.problems if p.split(": ", 1)[1] not in seen]
    report.duplicates = max(report.duplicates, final.duplicates)
    report.duplicate_keys.update(final.duplicate_keys)
    report.delivered = sum(deliveries.values())
    check_late_writes(task_ids, sandbox, report)


def check_late_writes(task_ids: list[int], sandbox: SandboxClient, report: Report, resolution: float = 0.0) -> None:
    """Every delivery the receiver holds, late ones included, against the
    ledger's transitions of its effect: one that landed after the caller
    stopped waiting (a timeout, a drop, a kill, a pause: the effect was
    already `unknown`) is a late write; one that landed after the ledger had
    settled the effect (`committed` or `failed`) is counted too; one that
    landed after a look-up said "not found" for its key (and before the
    retry that look-up allowed) is a bug: the look-up was trusted too early.
    `resolution`: how coarse the receiver's times are (RT: 1 s, truncated); a
    delivery with a transition of its effect within that much after its time
    may have landed on either side of it, and is counted late at most."""
    effects = {pk: (key, task) for pk, key, task in Effect.objects.filter(
        owner_task__in=[str(t) for t in task_ids]).values_list("pk", "idempotency_key", "owner_task")}
    marks: dict[str, list[tuple[dt.datetime, str]]] = {}
    for effect_id, to_state, event, at in (EffectTransition.objects.filter(effect_id__in=effects).order_by("id")
                                           .values_list("effect_id", "to_state", "event", "at")):
        kind = ("unknown" if to_state == EffectState.UNKNOWN else
                "not_found" if event == "EFFECT_RECONCILED" and to_state == EffectState.FAILED else
                "retry" if event == "EFFECT_RETRY" else
                "settled" if to_state in (EffectState.COMMITTED, EffectState.FAILED) else "")
        if kind:
            marks.setdefault(effects[effect_id][0], []).append((at, kind))
    tasks = dict(effects.values())
    for d in sandbox.deliveries(limit=1_000_000):
        landed = dt.datetime.fromisoformat(d["created_at"])
        before = [kind for at, kind in marks.get(d.get("key"), ()) if at < landed]
        task = tasks.get(d.get("key"))
        if "unknown" in before:
            report.late_writes += 1
            report.count(task, "late")
        blurred = landed + dt.timedelta(seconds=resolution)
        if any(landed <= at < blurred for at, _ in marks.get(d.get("key"), ())):
            continue
        if before and before[-1] in ("settled", "not_found"):
            report.after_settled += 1
            report.count(task, "after settled")
        if before and before[-1] == "not_found":
            report.problems.append(f"delivery {d['id']} with key {d['key'][:12]} landed after a look-up said "
                                   "it had not happened")
            report.landed_after_not_found += 1
            report.count(task, "after not found")


def check_round(task: Task, sandbox: SandboxClient, report: Report) -> None:
    effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task=str(task.pk))}
    deliveries = Counter({k: n for k, n in all_deliveries(sandbox).items() if k in effects})
    check_deliveries(effects, deliveries, report, f"task {task.pk}")
    for key, effect in effects.items():
        if effect.state == EffectState.COMMITTED and key not in deliveries:
            report.problems.append(f"task {task.pk}: {effect.action} item {effect.owner_item} committed but never "
                                   "delivered")
    report.delivered += sum(deliveries.values())
    check_task(task, report)


def check_task(task: Task, report: Report) -> None:
    """What the ledger and the task say, whichever system is the oracle: no
    effect left in intent, every item done; and the counts."""
    effects = list(Effect.objects.filter(owner_task=str(task.pk)))
    report.items += task.items.count()
    for effect in effects:
        if effect.state == EffectState.INTENT:
            report.problems.append(f"task {task.pk}: {effect.action} item {effect.owner_item} left in intent")
    not_done = task.items.exclude(status=ItemStatus.DONE)
    if not_done.exists():
        report.lost_items += not_done.count()
        report.count(task.pk, "lost", not_done.count())
        sample = ", ".join(f"{i.ticket_id}={i.status}" for i in not_done[:5])
        report.problems.append(f"task {task.pk}: {not_done.count()} item(s) not done ({sample}); "
                               f"task is {task.status}")
    report.committed += sum(1 for e in effects if e.state == EffectState.COMMITTED)
    report.reconciled += sum(1 for e in effects if e.resolved_by == "reconcile")
    report.resumes += Event.objects.filter(task=task, type=EventType.RESUMED).count()
    report.failed_items += Event.objects.filter(task=task, type=EventType.ITEM_FAILED).count()
    report.suspensions += Event.objects.filter(task=task, type=EventType.SUSPENDED).count()
    report.blocked += BlockedDuplicate.objects.filter(owner_task=str(task.pk)).count()


@dataclass
class SandboxOracle:
    """The sandbox helpdesk as the kill test's oracle: it records every delivery by key."""

    sandbox: SandboxClient

    def create_tickets(self, rows: list) -> list:
        return rows  # the sandbox accepts any ticket id

    def holds(self, effect: Effect) -> bool:
        """Whether the sandbox holds the effect's write: what a person checking the helpdesk would see."""
        return bool(self.sandbox.deliveries(key=effect.idempotency_key))

    def play_operator(self, task: Task, report: Report) -> None:
        """For unknown effects on channels without look-up (email): ask the oracle."""
        now = timezone.now()
        for effect in Effect.objects.filter(owner_task=str(task.pk), state=EffectState.UNKNOWN, channel="email"):
            if now < reconcile_not_before(effect):
                continue  # the call it guards may still be in flight
            happened = bool(self.sandbox.deliveries(key=effect.idempotency_key))
            effect_review(effect_id=effect.pk, verdict="happened" if happened else "not_happened",
                          reason="kill test: the sandbox (oracle) was asked", actor="killtest")
            report.reviewed += 1

    def check_round(self, task: Task, report: Report) -> None:
        check_round(task, self.sandbox, report)

    def check_run(self, task_ids: list[int], report: Report) -> None:
        check_run(task_ids, self.sandbox, report)
