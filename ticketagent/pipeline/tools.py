"""The agent's read-only tools (effect class recompute): the customer's other tickets, the playbook's articles."""

from ticketagent.llm.base import Tools
from ticketagent.models import Item
from ticketagent.playbooks.search import articles_search


def item_tools(item: Item, *, version_id: int) -> Tools:
    """The draft step's tools for `item`, its knowledge search over the articles of playbook version `version_id`."""

    def customer_tickets():
        others = (Item.objects.filter(task_id=item.task_id, customer_email=item.customer_email)
                  .exclude(pk=item.pk).values("ticket_id", "subject", "status")[:20])
        return list(others)

    def knowledge_base(query: str):
        return articles_search(version_id=version_id, query=query)

    return Tools(customer_tickets=customer_tickets, knowledge_base=knowledge_base)
