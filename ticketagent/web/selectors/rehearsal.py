"""Reads for the rehearsal pages: per-ticket rows, distributions, agreement with expected labels, comparisons.

A rehearsal's items end after the decision, so everything shown here is in
their checkpoints' step outputs (`triage`, `draft`, `decide`) and in the
model steps' `STEP_DONE` events (their `usage`). Each read is a fixed number
of queries, whatever the number of tickets: the summaries read only the
small parts of the checkpoints (triage and decision) in one query, and the
per-ticket table one page at a time.
"""

from collections import Counter
from dataclasses import dataclass, field

from django.core.paginator import Paginator
from django.db.models import Max, Min, TextField, Value
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import MD5, Concat

from ticketagent.eventlog.usage import items_usage, task_usage, usage_events
from ticketagent.llm.base import Usage
from ticketagent.models import Item, Task
from ticketagent.plan import EFFECT_STEPS, held_for_approval
from ticketagent.playbooks.models import PlaybookVersion, VersionStatus
from ticketagent.playbooks.services import published_spec
from ticketagent.upload.rows import PRIORITIES

PAGE_SIZE = 50
DISAGREEMENTS_SHOWN = 200
FIELDS = ("category", "priority", "status", "actions")  # what a file's expected labels may say


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Share:
    """One value of a distribution: how many decided tickets have it."""

    name: str
    n: int
    percent: int


@dataclass(frozen=True)
class Agreement:
    """One expected field: how many decided tickets with that label agree."""

    field: str
    agree: int
    n: int

    @property
    def percent(self) -> int | None:
        return round(100 * self.agree / self.n) if self.n else None


@dataclass(frozen=True)
class Confusion:
    """Expected category (rows) × category the rehearsal gave (columns), over the labelled decided tickets."""

    columns: list[str]
    rows: list[tuple[str, list[tuple[str, int]], int]]  # expected, [(got, n)], row total


@dataclass(frozen=True)
class Disagreement:
    item_id: int
    ticket_id: str
    subject: str
    fields: list[tuple[str, str, str]]  # (field, expected, got)

    @property
    def by_field(self) -> dict[str, tuple[str, str]]:
        return {name: (want, got) for name, want, got in self.fields}


@dataclass
class Summary:
    """The whole rehearsal in numbers, over the tickets decided so far."""

    total: int
    decided: int
    labelled: int  # decided tickets with at least one expected label
    distributions: list[tuple[str, str, str, list[Share]]]  # (key, title, row heading, shares)
    agreement: list[Agreement]
    confusion: Confusion | None
    disagreements: list[Disagreement]
    disagreement_count: int
    tokens: Usage
    wall_seconds: float | None = None  # from the first model call's start to the last one's end

    @property
    def average_tokens(self) -> int:
        return round(self.tokens.total / self.decided) if self.decided else 0


@dataclass
class TicketRow:
    """One ticket of the per-ticket table: what the rehearsal would have done, and how it compares."""

    item: Item
    triage: dict
    draft: dict
    decide: dict
    expected: dict
    agree: dict  # field -> bool, for each expected label of a decided ticket
    tokens: Usage | None

    allow_auto_close: bool = False  # the rehearsal's, which its go live takes

    @property
    def held(self) -> list[tuple[str, str]]:
        """What go live will hold, and why (`plan.held_for_approval`: a close without automatic close too)."""
        return sorted(held_for_approval(self.decide, allow_auto_close=self.allow_auto_close).items())

    @property
    def expected_marks(self) -> list[tuple[str, str, bool | None, str]]:
        """(field, expected value, agrees -- None until decided --, what was given) for each label the file gave."""
        return [(name, _want(name, self.expected), self.agree.get(name), _got(name, self.triage, self.decide))
                for name in FIELDS if self.expected.get(name)]


# --------------------------------------------------------------------------- agreement


def agreement_of(expected: dict, triage: dict, decide: dict | None) -> dict[str, bool]:
    """Each expected label of a decided ticket, and whether the rehearsal agrees (actions: as a set)."""
    if not decide or not expected:
        return {}
    out = {}
    for name in ("category", "priority"):
        if expected.get(name):
            out[name] = (triage or {}).get(name) == expected[name]
    if expected.get("status"):
        out["status"] = _status(decide) == expected["status"]
    if expected.get("actions"):
        out["actions"] = set(decide.get("actions") or ()) == set(expected["actions"])
    return out


def _status(decide: dict) -> str:
    """The status a decision sets: none when set_status does not run."""
    return (decide.get("status") or "pending") if "set_status" in (decide.get("actions") or ()) else "none"


def _got(name: str, triage: dict, decide: dict) -> str:
    if name == "actions":
        return ", ".join(decide.get("actions") or ()) or "none"
    if name == "status":
        return _status(decide or {})
    return str((triage or {}).get(name) or "—")


def _want(name: str, expected: dict) -> str:
    if name == "actions":  # in plan order, as the actions that would run are listed
        return ", ".join(sorted(expected[name], key=lambda a: EFFECT_STEPS.index(a) if a in EFFECT_STEPS else 99))
    return str(expected[name])


# --------------------------------------------------------------------------- the summary


def _shares(counter: Counter, decided: int, order=()) -> list[Share]:
    """Counts as shares of the decided tickets: in `order` first (plan or priority order), then most frequent."""
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(counter, key=lambda name: (rank.get(name, len(rank)), -counter[name], name))
    return [Share(name, counter[name], round(100 * counter[name] / decided) if decided else 0) for name in names]


class _Tally:
    """The summary's counters, fed one decided ticket at a time."""

    def __init__(self, *, allow_auto_close: bool):
        self.allow_auto_close = allow_auto_close  # the rehearsal's: what its go live holds
        self.counters = {key: Counter() for key in ("categories", "priorities", "actions", "held", "rules", "checks")}
        self.agree, self.labelled_n = Counter(), Counter()
        self.pairs: Counter = Counter()  # (expected category, got category)
        self.labelled, self.disagreements, self.disagreement_count = 0, [], 0

    def add(self, item_id, ticket_id, subject, expected, triage, decide) -> None:
        c = self.counters
        c["categories"][triage.get("category") or "—"] += 1
        c["priorities"][triage.get("priority") or "—"] += 1
        c["actions"].update(decide.get("actions") or ())
        c["held"].update(f"{action} — {why}" for action, why in
                         held_for_approval(decide, allow_auto_close=self.allow_auto_close).items())
        c["rules"].update(rule.get("rule", "") for rule in decide.get("rules") or ())
        c["checks"].update(check.get("check", "") for check in decide.get("checks") or ())
        agree = agreement_of(expected, triage, decide)
        if not agree:
            return
        self.labelled += 1
        for name, ok in agree.items():
            self.labelled_n[name] += 1
            self.agree[name] += ok
        if "category" in agree:
            self.pairs[(expected["category"], triage.get("category") or "—")] += 1
        wrong = [(name, _want(name, expected), _got(name, triage, decide)) for name in FIELDS
                 if agree.get(name) is False]
        if wrong:
            self.disagreement_count += 1
            if len(self.disagreements) < DISAGREEMENTS_SHOWN:
                self.disagreements.append(Disagreement(item_id, ticket_id, subject, wrong))


# (key, title, what one row is)
DISTRIBUTIONS = (("categories", "Categories", "Category"), ("priorities", "Priorities", "Priority"),
                 ("actions", "Actions that would run", "Action"), ("held", "Held for approval", "Action and why"),
                 ("rules", "Rules applied", "Rule"), ("checks", "Failed reply checks", "Check"))


def _category_order(version: PlaybookVersion) -> list[str]:
    return [c.name for c in published_spec(version).categories]


def _confusion(pairs: Counter, order: list[str]) -> Confusion | None:
    if not pairs:
        return None
    rank = {name: i for i, name in enumerate(order)}

    def ordered(names):
        return sorted(set(names), key=lambda name: (rank.get(name, len(rank)), name))

    columns = ordered(got for _, got in pairs)
    rows = [(want, [(got, pairs.get((want, got), 0)) for got in columns],
             sum(n for (w, _), n in pairs.items() if w == want))
            for want in ordered(want for want, _ in pairs)]
    return Confusion(columns, rows)


def rehearsal_summary(task: Task) -> Summary:
    """Distributions, agreement, the confusion table and the disagreements over every decided ticket, and the
    tokens of the whole rehearsal. Two queries: the items with their triage and decision (not their drafts),
    and the tokens."""
    tally, total = _Tally(allow_auto_close=task.allow_auto_close), 0
    rows = (Item.objects.filter(task=task).order_by("row")
            .values_list("pk", "ticket_id", "subject", "expected", "checkpoint__step_outputs__triage",
                         "checkpoint__step_outputs__decide"))
    for item_id, ticket_id, subject, expected, triage, decide in rows.iterator(chunk_size=2000):
        total += 1
        if decide:
            tally.add(item_id, ticket_id, subject, expected or {}, triage or {}, decide)
    decided = sum(tally.counters["categories"].values())
    order = {"categories": _category_order(task.playbook_version), "priorities": PRIORITIES,
             "actions": EFFECT_STEPS}
    distributions = [(key, title, column, _shares(tally.counters[key], decided, order.get(key, ())))
                     for key, title, column in DISTRIBUTIONS]
    agreement = [Agreement(name, tally.agree[name], tally.labelled_n[name]) for name in FIELDS
                 if tally.labelled_n[name]]
    return Summary(total=total, decided=decided, labelled=tally.labelled, distributions=distributions,
                   agreement=agreement, confusion=_confusion(tally.pairs, order["categories"]),
                   disagreements=tally.disagreements, disagreement_count=tally.disagreement_count,
                   tokens=task_usage(task.pk), wall_seconds=usage_wall_seconds(task))


def usage_wall_seconds(task: Task) -> float | None:
    """How long the rehearsal's model calls took on the clock: from the first call's start (its step's event
    less its milliseconds) to the last one's end. Calls that run side by side count once, unlike the sum of
    their times (`Usage.seconds`). None before the first call. Two queries."""
    span = usage_events().filter(task_id=task.pk).aggregate(first=Min("timestamp"), last=Max("timestamp"))
    if span["first"] is None:
        return None
    first = usage_events().filter(task_id=task.pk).order_by("timestamp").values_list("payload__usage__ms",
                                                                                       flat=True).first()
    return (span["last"] - span["first"]).total_seconds() + (first or 0) / 1000


# --------------------------------------------------------------------------- the per-ticket table


def rehearsal_page(task: Task, page, only=None) -> tuple[object, list[TicketRow]]:
    """One page of the per-ticket table (PAGE_SIZE tickets in file order; of the item ids `only`, when given):
    the page, and its rows. Three queries: the count, the items with their checkpoints, their tokens."""
    items = task.items.select_related("checkpoint").order_by("row")
    if only is not None:
        items = items.filter(pk__in=list(only))
    items = Paginator(items, PAGE_SIZE).get_page(page)
    tokens = items_usage(item.pk for item in items)
    rows = []
    for item in items:
        checkpoint = getattr(item, "checkpoint", None)
        outputs = checkpoint.step_outputs if checkpoint is not None else {}
        triage, decide = outputs.get("triage") or {}, outputs.get("decide") or {}
        rows.append(TicketRow(item=item, triage=triage, draft=outputs.get("draft") or {}, decide=decide,
                              expected=item.expected or {}, agree=agreement_of(item.expected or {}, triage, decide),
                              tokens=tokens.get(item.pk), allow_auto_close=task.allow_auto_close))
    return items, rows


# --------------------------------------------------------------------------- a subset of the tickets


AGREEMENT_FILTERS = {"agrees": "agrees with every expected label", "disagrees": "disagrees on an expected label",
                     "unlabelled": "has no expected label"}
HELD_FILTERS = {"held": "has an action held for approval", "not_held": "has nothing held"}


def _matches(expected, triage, decide, *, agreement: str, category: str, held: str) -> bool:
    if not decide:
        return False  # undecided: a filter says what the rehearsal decided
    agree = agreement_of(expected or {}, triage or {}, decide)
    if agreement == "agrees" and not (agree and all(agree.values())):
        return False
    if agreement == "disagrees" and all(agree.values()):
        return False
    if agreement == "unlabelled" and agree:
        return False
    if category and (triage or {}).get("category") != category:
        return False
    if held and bool(decide.get("held")) != (held == "held"):
        return False
    return True


def items_matching(task: Task, *, agreement: str = "", category: str = "", held: str = "") -> list[int] | None:
    """The ids of the decided tickets that match every filter given (agreement with the expected labels, the
    category given, held or not), in file order; None when no filter is given. One query."""
    if not (agreement or category or held):
        return None
    rows = (Item.objects.filter(task=task).order_by("row")
            .values_list("pk", "expected", "checkpoint__step_outputs__triage", "checkpoint__step_outputs__decide"))
    return [pk for pk, expected, triage, decide in rows.iterator(chunk_size=2000)
            if _matches(expected, triage, decide, agreement=agreement, category=category, held=held)]


def categories_given(task: Task) -> list[str]:
    """The categories the rehearsal gave, in the playbook's order (the category filter's choices)."""
    given = set(Item.objects.filter(task=task, checkpoint__step_outputs__has_key="triage")
                .values_list("checkpoint__step_outputs__triage__category", flat=True).distinct())
    order = _category_order(task.playbook_version)
    return [c for c in order if c in given] + sorted(c for c in given if c and c not in order)


# --------------------------------------------------------------------------- around the rehearsal


def compare_versions(task: Task) -> list[PlaybookVersion]:
    """The other published versions of the rehearsal's playbook, newest first (what it can be compared with)."""
    version = task.playbook_version
    return list(PlaybookVersion.objects.filter(playbook_id=version.playbook_id, status=VersionStatus.PUBLISHED)
                .exclude(pk=version.pk).select_related("playbook").order_by("-number"))


def rehearsal_relatives(task: Task) -> tuple[Task | None, list[Task]]:
    """The rehearsal this one was rehearsed again from (if any), and the rehearsals made from this one."""
    source = task.source_task if task.source_task_id and task.source_task.rehearsal else None
    reruns = list(Task.objects.filter(source_task=task, rehearsal=True).select_related("playbook_version__playbook")
                  .order_by("id"))
    return source, reruns


# --------------------------------------------------------------------------- two rehearsals compared


@dataclass(frozen=True)
class Side:
    """What one rehearsal decided for a ticket (the fields a comparison looks at)."""

    item_id: int
    category: str
    priority: str
    actions: tuple
    held: tuple  # (action, why), sorted
    draft_hash: str
    agree: dict  # field -> bool, for each expected label

    @property
    def held_actions(self) -> str:
        return ", ".join(action for action, _ in self.held) or "none"


class ActionsChange:
    """What a ticket's change did to its actions (`before` and `after` each hold `actions`)."""

    @property
    def actions_added(self) -> list[str]:
        return [a for a in self.after.actions if a not in self.before.actions]

    @property
    def actions_removed(self) -> list[str]:
        return [a for a in self.before.actions if a not in self.after.actions]


@dataclass(frozen=True)
class Change(ActionsChange):
    ticket_id: str
    subject: str
    before: Side
    after: Side
    changed: tuple  # the fields that differ: category, priority, actions, held, draft


COMPARED = ("category", "priority", "actions", "held", "draft")


@dataclass
class Comparison:
    before: Task
    after: Task
    matched: int  # tickets decided in both
    changes: list[Change]
    counts: dict  # field -> tickets where it changed
    only_before: list[str] = field(default_factory=list)  # ticket ids decided in one rehearsal only
    only_after: list[str] = field(default_factory=list)
    agreement: list[tuple[str, Agreement, Agreement]] = field(default_factory=list)


def _sides(task: Task) -> dict[str, tuple[str, Side]]:
    """Ticket id -> (subject, what the rehearsal decided), for its decided tickets; one query, drafts hashed
    by the database (their text never leaves it)."""
    draft = KeyTransform("draft", "checkpoint__step_outputs")
    text = Concat(KeyTextTransform("subject", draft), Value("\x1f"), KeyTextTransform("body", draft),
                  output_field=TextField())
    rows = (Item.objects.filter(task=task, checkpoint__step_outputs__has_key="decide")
            .annotate(draft_hash=MD5(text))
            .values_list("pk", "ticket_id", "subject", "expected", "checkpoint__step_outputs__triage",
                         "checkpoint__step_outputs__decide", "draft_hash"))
    out = {}
    for item_id, ticket_id, subject, expected, triage, decide, draft_hash in rows.iterator(chunk_size=2000):
        if not decide:
            continue
        triage = triage or {}
        out[ticket_id] = (subject, Side(item_id, triage.get("category") or "—", triage.get("priority") or "—",
                                        tuple(decide.get("actions") or ()),
                                        tuple(sorted(held_for_approval(
                                            decide, allow_auto_close=task.allow_auto_close).items())),
                                        draft_hash or "",
                                        agreement_of(expected or {}, triage, decide)))
    return out


def _differences(a: Side, b: Side) -> tuple:
    values = {"category": (a.category, b.category), "priority": (a.priority, b.priority),
              "actions": (set(a.actions), set(b.actions)), "held": (a.held, b.held),
              "draft": (a.draft_hash, b.draft_hash)}
    return tuple(name for name in COMPARED if values[name][0] != values[name][1])


def rehearsals_compare(before: Task, after: Task) -> Comparison:
    """Ticket by ticket (matched by ticket id), what changed from one rehearsal to the other: category,
    priority, actions, held actions and the draft; with each one's agreement with the expected labels.
    Two queries."""
    a, b = _sides(before), _sides(after)
    changes, counts = [], Counter()
    tallies = {"before": Counter(), "after": Counter(), "n": Counter()}
    for ticket_id in sorted(a.keys() & b.keys(), key=lambda t: a[t][1].item_id):
        subject, one = a[ticket_id]
        two = b[ticket_id][1]
        diff = _differences(one, two)
        counts.update(diff)
        if diff:
            changes.append(Change(ticket_id, subject, one, two, diff))
        _tally_pair(tallies, one, two)
    agreement = [(name, Agreement(name, tallies["before"][name], tallies["n"][name]),
                  Agreement(name, tallies["after"][name], tallies["n"][name]))
                 for name in FIELDS if tallies["n"][name]]
    return Comparison(before=before, after=after, matched=len(a.keys() & b.keys()), changes=changes,
                      counts={name: counts[name] for name in COMPARED},
                      only_before=sorted(a.keys() - b.keys()), only_after=sorted(b.keys() - a.keys()),
                      agreement=agreement)


def _tally_pair(tallies: dict, one: Side, two: Side) -> None:
    """Both sides' agreement with the expected labels, counted on the tickets the first one has labels for."""
    for name, ok in one.agree.items():
        tallies["n"][name] += 1
        tallies["before"][name] += ok
        tallies["after"][name] += two.agree.get(name, False)


def items_named(task: Task, ids) -> list[tuple[int, str]]:
    """(item id, ticket id) of those of `ids` that are the rehearsal's, in file order (the excluded tickets)."""
    if not ids:
        return []
    return list(task.items.filter(pk__in=list(ids)).order_by("row").values_list("pk", "ticket_id"))
