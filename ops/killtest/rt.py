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

A ticket change (status, queue, owner, priority) carries no key: its key
comment comes first and names the fields it changes, so each change in a
ticket's history belongs to the nearest key comment before it that names
its field. For a change's key, its key comments are its attempts (one each,
not a duplicate), and what was written is the change: a change that landed
for a row that is not `committed` is written but not recorded.

Late writes are counted as for the sandbox (`check_late_writes`), from the
time RT gives each transaction (`Created`, to the second: a write whose
second holds a transition of its effect may have landed on either side of it,
and is not taken as landing after a "not found"); for a change's key, from
the time of the change.
"""

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field, replace

from ledger.models import Effect, EffectState
from ops.killtest.checks import check_late_writes, check_task
from ops.killtest.report import Report
from ops.rt_server import RTServer
from ticketagent.channels.rt import keys_in
from ticketagent.channels.rt_lookup import announced_change
from ticketagent.models import Task
from ticketagent.upload.rows import TicketRow

REPLY_TYPES = ("Correspond", "Comment")
CHANGED_FIELDS = ("Status", "Queue", "Owner", "Priority")


@dataclass(frozen=True)
class RTWrite:
    """One reply or comment in a ticket's history, with the keys it carries."""

    ticket: str
    txn: str
    type: str
    keys: frozenset
    created: str = ""  # RT's Created, ISO 8601 UTC
    announces: frozenset = frozenset()  # a change's key comment: the fields of the change it comes before


@dataclass(frozen=True)
class RTChange:
    """One change of a ticket field in its history, with the keys of the key comment it belongs to."""

    ticket: str
    txn: str
    field: str
    keys: frozenset
    created: str = ""


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
    return rt_history(server, ticket, known)[0]


def rt_history(server: RTServer, ticket, known: dict | None = None) -> tuple[list[RTWrite], list[RTChange]]:
    """Every reply and comment on `ticket` with its keys, and every change of a field a key comment can name,
    each with the keys of the nearest key comment before it that names its field; oldest first."""
    known = {} if known is None else known
    writes, changes = [], []
    announcing: dict[str, frozenset] = {}  # field -> the keys of the last key comment naming it
    for txn in _pages(server, f"/ticket/{ticket}/history", fields="Type,CustomFields,Created,Field", orderby="id",
                      order="ASC"):
        tid = str(txn["id"])
        if txn.get("Type") in REPLY_TYPES:
            if tid not in known:
                known[tid] = _write(server, ticket, tid, txn)
            writes.append(known[tid])
            announcing.update({f: known[tid].keys for f in known[tid].announces})
        elif txn.get("Field") in CHANGED_FIELDS and txn.get("Type") != "SetWatcher":  # an owner: Set and SetWatcher
            field = txn["Field"]
            changes.append(RTChange(str(ticket), tid, field, announcing.get(field, frozenset()),
                                    str(txn.get("Created") or "")))
    return writes, changes


def _write(server: RTServer, ticket, tid: str, txn: dict) -> RTWrite:
    keys = {v for cf in txn.get("CustomFields") or [] for v in cf.get("values") or []}
    announces: set = set()
    for part in _pages(server, f"/transaction/{tid}/attachments", fields="Content"):
        content = str(part.get("Content") or "")
        keys.update(keys_in(content))
        announces.update(announced_change(content) or {})
    return RTWrite(str(ticket), tid, txn["Type"], frozenset(keys), str(txn.get("Created") or ""), frozenset(announces))


def _changes_delivered(effects: dict, announced: set, changed: Counter) -> set:
    """The changes' keys RT holds: a change that landed, or a key comment whose change RT needed not make (the
    ticket already had the value: no transaction) -- seen only as the committed row whose key comment is there."""
    in_place = {key for key in announced if key in effects and effects[key].state == EffectState.COMMITTED}
    return {key for key in changed if changed[key]} | in_place


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

    def holds(self, effect) -> None:
        """The harness's operator cannot tell by a key what RT holds: it only clicks Reconcile now here."""
        return None

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
        """The round's writes in RT as the sandbox lists deliveries: one per key a reply or comment carries, and
        for a change's key one per change (its key comments are its attempts, not what it delivers)."""
        found = []
        for task_id in task_ids:
            for ticket in self.tickets.get(task_id, []):
                writes, changes = rt_history(self.server, ticket, self.seen)
                for w in [*[w for w in writes if not w.announces], *changes]:
                    created = _when(w.created)
                    found += [{"id": f"txn-{w.txn}", "key": key, "created_at": created}
                              for key in sorted(w.keys) if created]
        return found

    def _check(self, task_id: int, report: Report, where: str, *, count: bool) -> None:
        effects = {e.idempotency_key: e for e in Effect.objects.filter(owner_task=str(task_id), channel="helpdesk")}
        per_key: Counter = Counter()
        replies_per_key: Counter = Counter()
        announced: set = set()  # the keys of changes' key comments
        changed: Counter = Counter()  # a change's key -> the changes in RT that belong to it
        for ticket in self.tickets.get(task_id, []):
            writes, changes = rt_history(self.server, ticket, self.seen)
            for write in writes:
                if write.type == "Correspond" and not write.keys:
                    self._problem(report, f"{where}: reply {write.txn} on ticket {ticket} carries no key")
                if write.announces:
                    announced.update(write.keys)
                    continue
                for key in write.keys:
                    per_key[key] += 1
                    replies_per_key[key] += write.type == "Correspond"
            changed.update(key for change in changes for key in change.keys)
        self._compare(effects, per_key, replies_per_key, report, where)
        self._compare_changes(effects, announced, changed, report, where)
        for key, effect in effects.items():
            if effect.state == EffectState.COMMITTED and key not in per_key and key not in announced:
                self._problem(report, f"{where}: {effect.action} item {effect.owner_item} committed but not in RT")
        self._resolved_mails(task_id, report, where)
        if count:
            report.delivered += sum(per_key.values()) + len(_changes_delivered(effects, announced, changed))

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

    def _compare_changes(self, effects: dict, announced: set, changed: Counter, report: Report, where: str) -> None:
        """A change's key comments and the changes after them against the ledger: a key comment alone is an
        attempt whose change did not land; a change that landed needs a `committed` row."""
        for key in sorted(announced | set(changed)):
            effect = effects.get(key)
            if effect is None:
                self._problem(report, f"{where}: a key comment in RT with key {key[:12]} has no ledger row")
            elif changed[key] and effect.state != EffectState.COMMITTED:
                self._problem(report, f"{where}: {effect.action} item {effect.owner_item} changed the ticket in RT "
                                      f"({changed[key]} change(s)) but the ledger says {effect.state}")

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
