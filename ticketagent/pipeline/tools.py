"""The agent's read-only tools (effect class recompute): the customer's other tickets, the knowledge base."""


from django.conf import settings

from ticketagent.llm.base import Tools
from ticketagent.models import Item


def item_tools(item: Item) -> Tools:
    import json
    from pathlib import Path

    def customer_tickets():
        others = (Item.objects.filter(task_id=item.task_id, customer_email=item.customer_email)
                  .exclude(pk=item.pk).values("ticket_id", "subject", "status")[:20])
        return list(others)

    def knowledge_base(query: str):
        entries = json.loads((Path(settings.BASE_DIR) / "docs" / "knowledge_base.json").read_text())
        q = query.lower()
        hits = [e for e in entries if e["topic"] == q or any(k in q for k in e["keywords"])]
        return hits[:3] or [e for e in entries if e["topic"] == "other"]

    return Tools(customer_tickets=customer_tickets, knowledge_base=knowledge_base)
