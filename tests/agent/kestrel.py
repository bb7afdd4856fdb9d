"""The Kestrel Cycles example (/work/shared/examples/kestrel/: policy.md, tickets.csv) as a playbook and tickets.

Read by the reply-check tests; skipped with the reason where the folder is
absent (a failure under TICKETAGENT_REQUIRE_ALL=1).
"""

import csv
import json
import re
from pathlib import Path

from ticketagent.llm.base import Tools
from ticketagent.llm.offline import OfflineModel
from ticketagent.playbooks.spec import PlaybookSpec, spec_validate
from ticketagent.playbooks.standard import standard_spec

KESTREL = Path("/work/shared/examples/kestrel")
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
