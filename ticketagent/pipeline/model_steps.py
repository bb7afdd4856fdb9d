"""The model steps (recompute): triage, draft and decide under the item's playbook, and what code adds to them.

The model answers; code then signs the reply (the playbook's signature),
records the articles the knowledge tool returned, applies the playbook's
rules to the triage (`triage_review`: category, priority) and reviews the
decision against its rules and reply checks (`decision_review`): what is
persisted is what will run, so effects are built from persisted data only.
"""

from ticketagent.llm.base import Allowance, Usage
from ticketagent.llm.schemas import Decision, Reply, Triage
from ticketagent.models import Item
from ticketagent.pipeline.tools import item_tools
from ticketagent.playbooks.rules import decision_review, triage_review
from ticketagent.playbooks.spec import PlaybookSpec, placeholders_fill


def item_ticket(item: Item) -> dict:
    return {"ticket_id": item.ticket_id, "customer_email": item.customer_email,
            "customer_name": item.customer_name, "subject": item.subject, "body": item.body,
            "priority": item.priority, "language": item.language, "metadata": item.metadata or {}}


def signed(body: str, signature: str) -> str:
    """The reply with the team's signature below it (once)."""
    signature = signature.strip()
    if not signature or body.rstrip().endswith(signature):
        return body
    return f"{body.rstrip()}\n\n{signature}"


def run_model_step(model, step: str, item: Item, outputs: dict, *, spec: PlaybookSpec, version_id: int,
                   allowance: Allowance | None = None) -> tuple[dict, list, Usage]:
    """One model step's output under playbook version `version_id` (`spec`), the tool calls it made, and
    what its model calls cost; each call asks `allowance` first (a task with a budget)."""
    ticket, usage = item_ticket(item), Usage()
    if step == "triage":
        triage = model.triage(ticket, playbook=spec, usage=usage, allowance=allowance).model_dump()
        return triage_review(spec, ticket=ticket, triage=triage), [], usage
    triage = Triage.model_validate({k: v for k, v in outputs["triage"].items() if k in Triage.model_fields})
    if step == "draft":
        tools = item_tools(item, version_id=version_id)
        reply = model.draft(ticket, triage, tools, playbook=spec, usage=usage, allowance=allowance)
        body = signed(reply.body, placeholders_fill(spec.reply.signature, ticket))
        return {"subject": reply.subject, "body": body, "articles": tools.articles}, tools.calls, usage
    draft = outputs["draft"]
    reply = Reply(subject=draft["subject"], body=draft["body"])
    decision: Decision = model.decide(ticket, triage, reply, playbook=spec, usage=usage, allowance=allowance)
    return decision_review(spec, ticket=ticket, triage=outputs["triage"], reply=draft,
                           decision=decision.model_dump()), [], usage

