"""Ticket sources: a helpdesk query (an RT TicketSQL search, a Zendesk view or search) turned into upload rows.

Each system's module offers `fetch_tickets(query, *, limit) -> list[dict]`,
one dict per ticket with the upload's columns (`ticket_id`, `customer_email`,
`subject`, `body`, and optionally `customer_name`, `priority`, `language`,
`metadata`); `helpdesk.fetch_tickets()` picks the one HELPDESK_KIND names.
The rows then go through the same validation as a file, all or nothing
(`ticketagent.services.imports`); each item keeps the helpdesk's ticket id.
"""


class SourceError(Exception):
    """A helpdesk query that cannot be turned into rows; the message says why."""
