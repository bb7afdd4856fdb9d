"""The kill test on Request Tracker: a private RT, each round's tickets created in it, its own histories as the oracle.

RT never honours idempotency keys, so what it holds is counted from RT
itself, not from the ledger: every reply and comment on the round's tickets
(history and content through REST2), with the keys it carries (the content
marker and the transaction custom field), and the mail RT sent.

* a key on more than one reply or comment: a duplicate (for `once` and
  `irreversible` actions), or for customers a second reply;
* a reply (Correspond) carrying no key: a write nobody can account for;
* a key with no ledger row, or whose row is not `committed`: written but
  not recorded;
* a committed effect whose key is on none of its ticket's writes: lost;
* more "Resolved" mails to a requestor than one: the customer saw it twice.

Late writes are counted as for the sandbox (`check_late_writes`), from the
time RT gives each transaction (`Created`, to the second: a write whose
second holds a transition of its effect may have landed on either side of it,
and is not taken as landing after a "not found").
"""

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field, replace

from ledger.models import Effect, EffectState
from ops.killtest.checks import check_late_writes, check_task
from ops.killtest.report import Report
from ops.rt_server import RTServer
from ticketagent.channels.rt import keys_in
from ticketagent.models import Task
from ticketagent.upload.rows import TicketRow

REPLY_TYPES = ("Correspond", "Comment")


@dataclass(frozen=True)
class RTWrite:
    """One reply or comment in a ticket's history, with the keys it carries."""

    ticket: str
    txn: str
    type: str
    keys: frozenset
    created: str = ""  # RT's Created, ISO 8601 UTC


def _pages(server: RTServer, path: str, **params) -> list[dict]:
    items: list[dict] = []
    page = 1
    while True:
        query = "&".join(f"{k}={v}" for k, v in {**params, "per_page": 100, "page": page}.items())
        answer = server.get(f"{path}?{query}")
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise RuntimeError(f"GET {path} answered {answer.status}: {answer.body!r}"[:300])
        batch = answer.body.get("items") or []
        items += batch
        if len(batch) < 100:
            return items
        page += 1


def rt_writes(server: RTServer, ticket, known: dict | None = None) -> list[RTWrite]:
    """Every reply and comment on `ticket`, oldest first, with its keys.
    `known` (transaction id -> RTWrite) spares reading a transaction twice."""
    known = {} if known is None else known
    writes = []
    for txn in _pages(server, f"/ticket/{ticket}/history", fields="Type,CustomFields,Created"):
        if txn.get("Type") not in REPLY_TYPES:
            continue
        tid = str(txn["id"])
        if tid not in known:
            keys = {v for cf in txn.get("CustomFields") or [] for v in cf.get("values") or []}
            for part in _pages(server, f"/transaction/{tid}/attachments", fields="Content"):
                keys.update(keys_in(str(part.get("Content") or "")))
            known[tid] = RTWrite(str(ticket), tid, txn["Type"], frozenset(keys), str(txn.get("Created") or ""))
        writes.append(known[tid])
    return writes


def _when(created: str) -> str:
    """RT's `Created` as an ISO time with its zone ("" when RT gave none)."""
    try:
        return dt.datetime.fromisoformat(created.replace("Z", "+00:00")).isoformat()
    except ValueError:
        return ""


@dataclass(frozen=True)
class _Deliveries:
    rows: list

    def deliveries(self, limit=None, **filters) -> list[dict]:
        return self.rows


@dataclass
class RTOracle:
    """The private RT of a kill test: its tickets per task, and the check of what it holds."""

    server: RTServer
    tickets: dict = field(default_factory=dict)  # task id -> RT ticket ids
    seen: dict = field(default_factory=dict)  # transaction id -> RTWrite
    problems_seen: set = field(default_factory=set)

    def create_tickets(self, rows: list[TicketRow]) -> list[TicketRow]:
        """A ticket in RT for each row; the rows then carry RT's ids."""
        made = []
        for row in rows:
            number = self.server.create_ticket(row.subject, requestor=row.customer_email, content=row.body)
            made.append(replace(row, ticket_id=str(number)))
        return made

    def play_operator(self, task: Task, report: Report) -> None:
        """Nothing to do: every RT effect has a look-up, so reconcile settles it."""

    def check_round(self, task: Task, report: Report) -> None:
        self.tickets[task.pk] = [item.ticket_id for item in task.items.all()]
        self._check(task.pk, report, f"task {task.pk}", count=True)
        check_task(task, report)

    def check_run(self, task_ids: list[int], report: Report) -> None:
        """At the end: writes that landed after their round was checked must
        still match the ledger."""
        final = Report()
        for task_id in task_ids:
            self._check(task_id, final, f"task {task_id} (end of run)", count=False)
        report.problems += final.problems
        report.duplicates += final.duplicates
        report.duplicate_keys.update(final.duplicate_keys)
        check_late_writes(task_ids, _Deliveries(self._deliveries(task_ids)), report, resolution=1.0)

    def _deliveries(self, task_ids: list[int]) -> list[dict]:
        """The round's writes in RT as the sandbox lists deliveries: one per key a write carries."""
        found = []
        for task_id in task_ids:
            for ticket in self.tickets.get(task_id, []):
                for write in rt_writes(self.server, ticket, self.seen):
                    created = _when(write.created)
                    found += [{"id": f"txn-{write.txn}", "key": key, "created_at": created}
                              for key in sorted(write.keys) if created]
        return found

    def _check(self, task_id: int, report: Report, where: str, *, count: bool) -> None:
        effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task=str(task_id), channel="helpdesk")}
        per_key: Counter = Counter()
        replies_per_key: Counter = Counter()
        for ticket in self.tickets.get(task_id, []):
            for write in rt_writes(self.server, ticket, self.seen):
                if write.type == "Correspond" and not write.keys:
                    self._problem(report, f"{where}: reply {write.txn} on ticket {ticket} carries no key")
                for key in write.keys:
                    per_key[key] += 1
                    replies_per_key[key] += write.type == "Correspond"
        self._compare(effects, per_key, replies_per_key, report, where)
        self._resolved_mails(task_id, report, where)
        if count:
            report.delivered += sum(per_key.values())

    def _compare(self, effects: dict, per_key: Counter, replies: Counter, report: Report, where: str) -> None:
        for key, n in per_key.items():
            effect = effects.get(key)
            if effect is None:
                self._problem(report, f"{where}: a write in RT with key {key[:12]} has no ledger row")
                continue
            doubled = replies[key] > 1 or (n > 1 and effect.effect_class in ("once", "irreversible"))
            if doubled:
                report.duplicate_keys[key] = (effect.owner_task, n - 1)
            if doubled and self._problem(report, f"{where}: {effect.action} for item {effect.owner_item} is in RT "
                                                 f"{n} times ({replies[key]} replies)"):
                report.duplicates += n - 1
            if effect.state != EffectState.COMMITTED:
                self._problem(report, f"{where}: {effect.action} item {effect.owner_item} is in RT but the ledger "
                                      f"says {effect.state}")
        for key, effect in effects.items():
            if effect.state == EffectState.COMMITTED and key not in per_key:
                self._problem(report, f"{where}: {effect.action} item {effect.owner_item} committed but not in RT")

    def _resolved_mails(self, task_id: int, report: Report, where: str) -> None:
        tickets = set(self.tickets.get(task_id, []))
        resolved = Counter()
        for mail in self.server.mails():
            subject = str(mail["Subject"] or "")
            for ticket in tickets:
                if subject.startswith(f"[rt.test #{ticket}] Resolved:"):
                    resolved[ticket] += 1
        for ticket, n in resolved.items():
            if n > 1:
                self._problem(report, f"{where}: the requestor of ticket {ticket} was mailed 'Resolved' {n} times")

    def _problem(self, report: Report, text: str) -> bool:
        """Record a problem once (the end-of-run check sees the rounds' again); True if it is new."""
        bare = text.split(": ", 1)[1]
        if bare in self.problems_seen:
            return False
        self.problems_seen.add(bare)
        report.problems.append(text)
        return True
