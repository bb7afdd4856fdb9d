"""Figure 2: time per effect through the gate, against one bare INSERT plus one UPDATE."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import connection, transaction
from django.utils import timezone

from ledger.actions import ActionSpec
from ledger.channels.base import CallDeadline, CallResult, Channel
from ledger.gate import effect_perform, intent_prepare, intent_record, outcome_record
from ledger.keys import idempotency_key, payload_hash, summarize
from ledger.models import Effect, EffectState, EffectTransition
from ops.bench.profiling import profile_section
from ops.bench.results import percentile
from ticketagent.models import Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.lease import ItemRun, Lease
from ticketagent.pipeline.phases import phase
from ticketagent.playbooks.services import version_default

if TYPE_CHECKING:
    from ops.bench.runner import Bench


class StubChannel(Channel):
    """Commits at once: only the gate's database work is measured."""

    name = "stub"

    @property
    def max_call_seconds(self) -> float:
        return 0.5  # it answers at once: the lease asked for a call this long holds under any lease setting

    def perform(self, spec: ActionSpec, payload: dict, key: str, deadline: CallDeadline) -> CallResult:
        return CallResult(EffectState.COMMITTED, external_ref="stub-1")


def payload(i: int) -> dict:
    return {"ticket": f"G-{i}", "body": {"to": f"g{i}@example.com", "subject": "Re: your request",
                                          "body": "Thank you for writing; here is our answer. " * 4}}


def run(bench: Bench) -> None:
    n = bench.sizes.gate_ops
    bench.log(f"== 2 gate: {n} effects per variant, vs one INSERT + one UPDATE (each its own transaction)")
    _floor_table()
    run_id = hashlib.sha256(str(time.time()).encode()).hexdigest()[:8]
    task, items = _owners(n)
    variants = _variants(run_id, task, items)
    variants.update(ledger_writes_by_hand(run_id, items))
    times: dict[str, list[float]] = {k: [] for k in variants}
    block = max(min(50, n // 4), 1)
    for fn in variants.values():  # warm-up: connection, caches
        fn(n)
    with profile_section(bench, "gate", "the gate"):
        done = 0
        while done < n:
            upto = min(done + block, n)
            for k, fn in variants.items():
                for i in range(done, upto):
                    t = time.perf_counter()
                    fn(i)
                    times[k].append(time.perf_counter() - t)
            done = upto
    Item.objects.filter(task=task).update(status=ItemStatus.DONE, lease_token="", lease_expires_at=None)
    _record(bench, times, n)


def _floor_table() -> None:
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, "
                    "key varchar(64) NOT NULL UNIQUE, state varchar(16) NOT NULL, payload jsonb NOT NULL, "
                    "updated_at timestamptz NOT NULL)")
        cur.execute("DELETE FROM bench_floor")


def _owners(n: int) -> tuple[Task, list[Item]]:
    """Owners for the "as wired" variant: a real task and running items with a lease."""
    task = Task.objects.create(name="bench gate", status=TaskStatus.COMPLETED, allow_auto_close=True,
                               playbook_version=version_default())
    lease_until = timezone.now() + dt.timedelta(days=1)
    items = Item.objects.bulk_create([
        Item(task=task, playbook_version_id=task.playbook_version_id, row=i + 2, ticket_id=f"G-{i}",
             customer_email=f"g{i}@example.com", subject="Gate",
             body="gate bench", status=ItemStatus.RUNNING, lease_token="bench-gate", lease_owner="bench",
             lease_expires_at=lease_until) for i in range(n + 1)])
    return task, items


def _variants(run_id: str, task: Task, items: list[Item]) -> dict[str, Callable[[int], None]]:
    stub = StubChannel()

    def floor(i: int) -> None:
        with connection.cursor() as cur:
            cur.execute("INSERT INTO bench_floor (key, state, payload, updated_at) VALUES (%s, 'intent', %s, %s) "
                        "RETURNING id", [f"{run_id}-{i}", json.dumps(payload(i)), timezone.now()])
            row_id = cur.fetchone()[0]
            cur.execute("UPDATE bench_floor SET state = 'committed', updated_at = %s WHERE id = %s",
                        [timezone.now(), row_id])

    def gate_only(i: int) -> None:  # the three calls, each in a transaction of its own, nothing else in them
        intent = intent_prepare(action="notify_customer", payload=payload(i), owner_task=f"bench-{run_id}",
                                owner_item=f"g{i}", owner_step="notify_customer", claim_token="bench")
        with transaction.atomic():
            effect = intent_record(intent).effect
        result = effect_perform(intent, effect, deadline=time.monotonic() + 60, channel=stub)
        with transaction.atomic():
            outcome_record(intent, effect, result)

    def gate_wired(i: int) -> None:
        item = items[i]
        # the three calls as the pipeline makes them (`steps.run_effect_step`)
        run = ItemRun(item=item, token="bench-gate", lease=Lease(item.pk, "bench-gate", time.monotonic()), cursor=0,
                      outputs={})
        intent = intent_prepare(action="notify_customer", payload=payload(i), owner_task=str(task.pk),
                                owner_item=str(item.pk), owner_step="notify_customer", claim_token="bench-gate")
        with phase(run):
            effect = intent_record(intent).effect
        result = effect_perform(intent, effect, deadline=run.lease.ensure(stub.max_call_seconds), channel=stub)
        with phase(run):
            outcome_record(intent, effect, result)

    return {"floor": floor, "gate": gate_only, "wired": gate_wired}


def _record(bench: Bench, times: dict[str, list[float]], n: int) -> None:
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    p95 = {k: percentile(v, 95) * 1000 for k, v in times.items()}
    bench.results.raw["gate"] = {"median_ms": med, "p95_ms": p95, "n": n}
    for k in times:
        bench.log(f"  {k:6s}: median {med[k]:.2f} ms, p95 {p95[k]:.2f} ms")
    r1, r2 = med["gate"] / med["floor"], med["wired"] / med["floor"]
    bench.results.add("2", "per effect: gate (ledger only) vs floor (INSERT + UPDATE)",
                      f"{med['gate']:.2f} vs {med['floor']:.2f} ms median = **{r1:.2f}×**")
    bench.results.add("2", "per effect: gate as the pipeline calls it (its lease checked in each phase) vs floor",
                      f"{med['wired']:.2f} vs {med['floor']:.2f} ms median = **{r2:.2f}×**")
    for k, label in (("raw", "reference: the gate's own ledger rows by hand, no ORM, a transaction per phase"),
                     ("single", "reference: the same rows, one statement per phase (no transaction block)"),
                     ("fenced", "reference: the same, the pipeline's fence folded into each statement (the leased "
                                "item locked in an `EXISTS`)")):
        if k in med:
            bench.results.add("2", label, f"{med[k]:.2f} vs {med['floor']:.2f} ms median = "
                              f"**{med[k] / med['floor']:.2f}×**")


TRANSITION_COLUMNS = "effect_id, event, from_state, to_state, actor, note, snapshot, at"


def ledger_writes_by_hand(run_id: str, items: list[Item]) -> dict[str, Callable[[int], None]]:
    """Figure 2's reference variants: the rows the gate writes for a new
    effect (the effect, its intent transition; the outcome, its transition)
    without the ORM -- as the gate does it, one transaction per phase, as
    one statement per phase (a data-modifying CTE, which commits by itself),
    and as that with the pipeline's fence folded into each statement; a
    transition with the row after the change, as the gate's. They tell what
    the target would take; the product does not use them."""
    sql = _by_hand_sql()

    def by_hand(i: int) -> None:
        values, summary, snapshot = _intent_row("raw", run_id, i)
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql["insert"], values)
            effect_id = cur.fetchone()[0]
            cur.execute(sql["transition"], [effect_id, "EFFECT_INTENT", "", EffectState.INTENT, "bench", summary,
                                            snapshot, timezone.now()])
        with transaction.atomic(), connection.cursor() as cur:
            now = timezone.now()
            cur.execute(sql["outcome"], [EffectState.COMMITTED, "stub-1", now, now, effect_id, EffectState.INTENT,
                                         "bench"])
            cur.fetchone()
            cur.execute(sql["transition"], [effect_id, "EFFECT_COMMITTED", EffectState.INTENT, EffectState.COMMITTED,
                                            "bench", "stub-1", snapshot, now])

    def one_statement(i: int, kind: str = "single", fence: tuple = ()) -> None:
        values, summary, snapshot = _intent_row(kind, run_id, i)
        insert, outcome = (sql["insert_fenced"], sql["outcome_fenced"]) if fence else (sql["insert"], sql["outcome"])
        with connection.cursor() as cur:
            cur.execute(f"WITH e AS ({insert}) {sql['transition_of_e']} RETURNING effect_id",
                        [*values, *fence, "EFFECT_INTENT", "", EffectState.INTENT, "bench", summary, snapshot,
                         timezone.now()])
            effect_id = cur.fetchone()[0]
            now = timezone.now()
            cur.execute(f"WITH e AS ({outcome}) {sql['transition_of_e']} RETURNING effect_id",
                        [EffectState.COMMITTED, "stub-1", now, now, effect_id, EffectState.INTENT, "bench", *fence,
                         "EFFECT_COMMITTED", EffectState.INTENT, EffectState.COMMITTED, "bench", "stub-1", snapshot,
                         now])
            cur.fetchone()

    def fenced(i: int) -> None:
        one_statement(i, "fenced", (items[i].pk, "bench-gate", ItemStatus.RUNNING))

    return {"raw": by_hand, "single": one_statement, "fenced": fenced}


def _by_hand_sql() -> dict[str, str]:
    fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    into = f"INSERT INTO {qn(EffectTransition._meta.db_table)} ({TRANSITION_COLUMNS})"
    outcome = (f"UPDATE {qn(Effect._meta.db_table)} SET state = %s, external_ref = %s, last_error = '', "
               "answered = true, outcome_at = %s, updated_at = %s WHERE id = %s AND state = %s AND claim_token = %s "
               "RETURNING id")
    # the pipeline's fence as one condition: the item still leased to this token, its row locked
    held = (f"EXISTS (SELECT 1 FROM {qn(Item._meta.db_table)} WHERE id = %s AND lease_token = %s AND status = %s "
            "FOR NO KEY UPDATE)")
    return {
        "insert": f"INSERT INTO {qn(Effect._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))}) "
                  "RETURNING id",
        "insert_fenced": f"INSERT INTO {qn(Effect._meta.db_table)} ({columns}) "
                         f"SELECT {', '.join(['%s'] * len(fields))} WHERE {held} RETURNING id",
        "transition": f"{into} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        "transition_of_e": f"{into} SELECT id, %s, %s, %s, %s, %s, %s, %s FROM e",
        "outcome": outcome,
        "outcome_fenced": outcome.replace(" RETURNING id", f" AND {held} RETURNING id"),
    }


def _intent_row(kind: str, run_id: str, i: int) -> tuple[list, str, str]:
    """A new effect's column values, summary and snapshot, as the gate builds them."""
    body = payload(i)
    p_hash = payload_hash(body)
    owner = f"bench-{kind}-{run_id}"
    effect = Effect(
        idempotency_key=idempotency_key(owner_task=owner, owner_item=f"g{i}", owner_step="notify_customer",
                                        action="notify_customer", p_hash=p_hash),
        slot=f"{owner}/g{i}/notify_customer/notify_customer", action="notify_customer", effect_class="once",
        channel="stub", state=EffectState.INTENT, attempts=1, owner_task=owner, owner_item=f"g{i}",
        owner_step="notify_customer", claim_token="bench", payload=body, payload_hash=p_hash,
        payload_summary=summarize(body), intent_at=timezone.now())
    fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
    values = [f.get_db_prep_save(f.pre_save(effect, True), connection) for f in fields]
    return values, effect.payload_summary, json.dumps(effect.snapshot())
