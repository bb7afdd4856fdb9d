"""Ticket sources: a helpdesk query (an RT TicketSQL search, a Zendesk view or search) turned into upload rows.

Each system's module offers `fetch_tickets(query, *, limit) -> list[dict]`,
one dict per ticket with the upload's columns; `helpdesk.fetch_tickets()`
picks the one HELPDESK_KIND names. The rows then go through the same
validation as a file, all or nothing (`ticketagent.services.imports`).
"""


class SourceError(Exception):
    """A helpdesk query that cannot be turned into rows; the message says why."""
