"""Regression before publish: the last labelled rehearsal of a playbook decided again under a draft, nothing written.

The rehearsal's own tickets and outputs are read; the draft's spec decides
them again through the code a rehearsal runs (`run_model_step`, which ends
in `decision_review`). What is asked of the model depends on the model the
rehearsal ran on:

- the offline model (deterministic code, no calls): triage, draft and
  decide run again in full under the draft, as a new rehearsal would;
- any other model: its rehearsed answers (triage, reply, chosen actions)
  are kept -- asking it again costs calls and minutes -- and the draft's
  rules, reply checks and escalation are applied to them again.

Nothing is written: no task, no item, no event, no effect. The knowledge
tool reads the draft's articles.
"""

from dataclasses import dataclass, field

from ticketagent.llm.offline import OfflineModel
from ticketagent.models import ACTIVE_TASK_STATUSES, Item, Task
from ticketagent.pipeline.model_steps import item_ticket, run_model_step
from ticketagent.playbooks.models import PlaybookVersion
from ticketagent.playbooks.rules import decision_review
from ticketagent.playbooks.services import version_spec
from ticketagent.playbooks.spec import PlaybookSpec
from ticketagent.web.selectors.rehearsal import FIELDS, ActionsChange, Agreement, agreement_of

# It runs inside the publish confirmation's request: the offline model decides a ticket in about a millisecond
# plus one article search; a larger rehearsal is read up to this many tickets and the page says so.
MAX_TICKETS = 2000
COMPARED = ("category", "priority", "status", "actions")
MODES = {"full": "the offline model decided every ticket again under this draft (triage, draft, decide)",
         "rules": "the model's rehearsed answers were kept and this draft's rules, reply checks and escalation "
                  "applied to them again (asking the model again would cost calls)"}


@dataclass(frozen=True)
class Decided:
    """What a ticket's decision says, in the fields a regression compares."""

    category: str
    priority: str
    status: str
    actions: tuple
    held: tuple

    @classmethod
    def of(cls, triage: dict, decide: dict) -> "Decided":
        return cls(category=triage.get("category") or "—", priority=triage.get("priority") or "—",
                   status=decide.get("status") or "—", actions=tuple(decide.get("actions") or ()),
                   held=tuple(sorted(decide.get("held") or {})))

    def value(self, name: str):
        return set(self.actions) if name == "actions" else getattr(self, name)


@dataclass(frozen=True)
class TicketChange(ActionsChange):
    item_id: int
    ticket_id: str
    subject: str
    before: Decided
    after: Decided
    changed: tuple  # of COMPARED


@dataclass
class Regression:
    rehearsal: Task
    mode: str  # a key of MODES
    tickets: int  # decided tickets read
    truncated: bool  # the rehearsal had more than MAX_TICKETS decided tickets
    agreement: list[tuple[str, Agreement, Agreement]] = field(default_factory=list)
    changes: list[TicketChange] = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # field -> tickets where it changed

    @property
    def how(self) -> str:
        return MODES[self.mode]


def labelled_rehearsal(version: PlaybookVersion) -> Task | None:
    """The latest ended rehearsal on any version of `version`'s playbook with expected labels in its file."""
    return (Task.objects.filter(rehearsal=True, playbook_version__playbook_id=version.playbook_id)
            .exclude(status__in=ACTIVE_TASK_STATUSES)
            .filter(pk__in=Item.objects.exclude(expected={}).values("task_id"))
            .select_related("playbook_version__playbook").order_by("-created_at", "-pk").first())


def _decided_again(mode: str, item: Item, outputs: dict, spec: PlaybookSpec, version_id: int) -> tuple[dict, dict]:
    """(triage, decide) of `item` under `spec`, by the rehearsal's code."""
    if mode == "full":
        model, fresh = OfflineModel(), {}
        for step in ("triage", "draft", "decide"):
            fresh[step] = run_model_step(model, step, item, fresh, spec=spec, version_id=version_id)[0]
        return fresh["triage"], fresh["decide"]
    decide = outputs["decide"]
    decision = {"actions": list(decide.get("chosen", decide.get("actions")) or ()), "status": decide.get("status"),
                "reason": decide.get("reason", "")}
    triage = outputs.get("triage") or {}
    return triage, decision_review(spec, ticket=item_ticket(item), triage=triage, reply=outputs.get("draft") or {},
                                   decision=decision)


def version_regression(version: PlaybookVersion) -> Regression | None:
    """The last labelled rehearsal of the playbook decided again under `version` (None if there is none):
    agreement with the expected labels before and after, and every ticket whose category, priority, status
    or actions changed."""
    rehearsal = labelled_rehearsal(version)
    if rehearsal is None:
        return None
    spec = version_spec(version)
    mode = "full" if rehearsal.model_label == OfflineModel.label else "rules"
    items = list(rehearsal.items.filter(checkpoint__step_outputs__has_key="decide").select_related("checkpoint")
                 .order_by("row")[:MAX_TICKETS + 1])
    result = Regression(rehearsal=rehearsal, mode=mode, tickets=min(len(items), MAX_TICKETS),
                        truncated=len(items) > MAX_TICKETS)
    tally = {key: {name: 0 for name in FIELDS} for key in ("before", "after", "n")}
    counts = dict.fromkeys(COMPARED, 0)
    for item in items[:MAX_TICKETS]:
        outputs = item.checkpoint.step_outputs
        triage, decide = _decided_again(mode, item, outputs, spec, version.pk)
        before, after = Decided.of(outputs.get("triage") or {}, outputs["decide"]), Decided.of(triage, decide)
        changed = tuple(name for name in COMPARED if before.value(name) != after.value(name))
        if changed:
            result.changes.append(TicketChange(item.pk, item.ticket_id, item.subject, before, after, changed))
            for name in changed:
                counts[name] += 1
        agreed_before = agreement_of(item.expected or {}, outputs.get("triage") or {}, outputs["decide"])
        agreed_after = agreement_of(item.expected or {}, triage, decide)
        for name, ok in agreed_before.items():
            tally["n"][name] += 1
            tally["before"][name] += ok
            tally["after"][name] += agreed_after.get(name, False)
    result.counts = counts
    result.agreement = [(name, Agreement(name, tally["before"][name], tally["n"][name]),
                         Agreement(name, tally["after"][name], tally["n"][name]))
                        for name in FIELDS if tally["n"][name]]
    return result
