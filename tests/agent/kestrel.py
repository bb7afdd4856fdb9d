"""The Kestrel Cycles example (/work/shared/examples/kestrel/: policy.md, tickets.csv) as a playbook and tickets.

Read by the reply-check and playbook-rule tests; skipped with the reason
where the folder is absent (a failure under TICKETAGENT_REQUIRE_ALL=1).
The shipped playbook (docs/examples/playbook-kestrel.yaml) is the policy as
rules; `rehearse` runs the offline model and the rules on tickets the way
the model steps do.
"""

import csv
import json
import re
from pathlib import Path

import yaml

from ticketagent.llm.base import Tools
from ticketagent.llm.offline import OfflineModel
from ticketagent.llm.schemas import Triage
from ticketagent.playbooks.rules import decision_review, triage_review
from ticketagent.playbooks.spec import PlaybookSpec, spec_validate
from ticketagent.playbooks.standard import standard_spec

KESTREL = Path("/work/shared/examples/kestrel")
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
PLAYBOOK = EXAMPLES / "playbook-kestrel.yaml"
REHEARSAL = EXAMPLES / "rehearsal-kestrel.csv"
PHONES = ["+49 30 5550 1200", "+1 555 0147"]  # policy rule 31: the only numbers a reply may give


def present() -> str:
    """Why the example cannot be read ("" when it can)."""
    missing = [name for name in ("policy.md", "tickets.csv") if not (KESTREL / name).is_file()]
    return f"the Kestrel example is not here ({KESTREL}: {', '.join(missing)} missing)" if missing else ""


def articles() -> list[dict]:
    """policy.md's articles: a bold title line, then its text."""
    text = (KESTREL / "policy.md").read_text(encoding="utf-8").split("## Articles", 1)[1]
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.strip().splitlines()
        if lines and re.fullmatch(r"\*\*(.+)\*\*", lines[0].strip()):
            out.append({"title": lines[0].strip().strip("*"), "body": " ".join(lines[1:]), "tags": []})
    return out


def spec() -> PlaybookSpec:
    data = standard_spec().model_dump(mode="json")
    data["name"] = "Kestrel Cycles"
    data["reply"]["signature"] = "Kestrel Support"
    data["checks"]["contacts_allowed"] = PHONES
    data["articles"] = articles()
    return spec_validate(data)


def tickets() -> dict[str, dict]:
    with (KESTREL / "tickets.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return {row["ticket_id"]: {**row, "metadata": json.loads(row["metadata"] or "{}")} for row in rows}


def _search(found: list[dict]):
    def knowledge_base(query: str) -> list[dict]:
        words = set(re.findall(r"\w+", query.casefold()))
        ranked = sorted(found, key=lambda a: -len(words & set(re.findall(r"\w+", (a["title"] + a["body"]).casefold()))))
        return [{"id": i, "title": a["title"], "body": a["body"]} for i, a in enumerate(ranked[:1])]
    return knowledge_base


def offline_drafts(playbook: PlaybookSpec) -> dict[str, tuple[dict, dict]]:
    """The offline model's triage and draft of every Kestrel ticket (ticket id -> (reply, triage))."""
    model, out = OfflineModel(), {}
    found = [a.model_dump() for a in playbook.articles]
    for ticket_id, ticket in tickets().items():
        triage = model.triage(ticket, playbook=playbook)
        tools = Tools(customer_tickets=list, knowledge_base=_search(found))
        reply = model.draft(ticket, triage, tools, playbook=playbook)
        out[ticket_id] = (reply.model_dump(), triage.model_dump())
    return out


def playbook() -> PlaybookSpec:
    """The shipped Kestrel playbook: the policy's rules, facts, word lists, checks and articles."""
    return spec_validate(yaml.safe_load(PLAYBOOK.read_text(encoding="utf-8")))


def labelled() -> dict[str, dict]:
    """The shipped rehearsal file's tickets (tickets.csv with `expected_status`, from expected.md)."""
    with REHEARSAL.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return {row["ticket_id"]: {**row, "metadata": json.loads(row["metadata"] or "{}")} for row in rows}


def rehearse(spec: PlaybookSpec, ticket: dict, model=None) -> tuple[dict, dict]:
    """What the model steps persist for `ticket` under `spec`: the triage (after the triage rules) and the
    decision (after the rules and the reply checks)."""
    model = model or OfflineModel()
    triage = triage_review(spec, ticket=ticket, triage=model.triage(ticket, playbook=spec).model_dump())
    plain = Triage.model_validate({k: v for k, v in triage.items() if k in Triage.model_fields})
    tools = Tools(customer_tickets=list, knowledge_base=_search([a.model_dump() for a in spec.articles]))
    reply = model.draft(ticket, plain, tools, playbook=spec)
    decision = model.decide(ticket, plain, reply, playbook=spec)
    return triage, decision_review(spec, ticket=ticket, triage=triage, reply=reply.model_dump(),
                                   decision=decision.model_dump())
