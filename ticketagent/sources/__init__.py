"""Ticket batches from a helpdesk query instead of a file: each source module turns a query into upload rows.

A source's `fetch_tickets(query, *, limit)` returns one dict per ticket with
the upload's columns (`ticket_id`, `customer_email`, `subject`, `body`, and
optionally `customer_name`, `priority`, `language`, `metadata`), so a batch
from a helpdesk goes through the same validation as an uploaded file. Each
item keeps the helpdesk's ticket id. `zendesk`: a Zendesk view or search.
"""


class SourceError(Exception):
    """A helpdesk query that cannot be turned into rows; the message says why."""
