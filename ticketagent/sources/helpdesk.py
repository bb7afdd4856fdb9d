"""The configured helpdesk as a ticket source: which system, where, and its query in rows."""

from urllib.parse import urlsplit

from django.conf import settings

from ticketagent.channels.registry import helpdesk_kind
from ticketagent.sources import SourceError
from ticketagent.sources import rt as rt_source
from ticketagent.sources import zendesk as zendesk_source

# The helpdesks whose tickets can be searched: HELPDESK_KIND -> the module whose
# fetch_tickets(query, *, limit) does it.
SOURCES = {"rt": rt_source, "zendesk": zendesk_source}

KIND_LABELS = {"rest": "the generic REST helpdesk", "rt": "Request Tracker", "zendesk": "Zendesk"}
QUERY_HELP = {
    "rt": "a TicketSQL search, e.g. Queue = 'General' AND Status = 'new'",
    "zendesk": "a view (view:123) or a search, e.g. status<solved tags:refund",
}


def helpdesk_summary() -> dict:
    """What the pages show: the kind, where it is (no credentials), and how a query looks."""
    kind = helpdesk_kind()
    parts = urlsplit(settings.HELPDESK_URL)
    where = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"
    return {"kind": kind, "label": KIND_LABELS.get(kind, kind), "url": where.rstrip("/"),
            "user": settings.HELPDESK_USER, "can_search": kind in QUERY_HELP, "query_help": QUERY_HELP.get(kind, "")}


def fetch_tickets(query: str, *, limit: int) -> list[dict]:
    """The tickets a query names on the configured helpdesk, as upload rows (dicts)."""
    kind = helpdesk_kind()
    query = (query or "").strip()
    if not query:
        raise SourceError("the query is empty: " + QUERY_HELP.get(kind, "this helpdesk cannot be searched"))
    source = SOURCES.get(kind)
    if source is None:
        searchable = " or ".join(sorted(SOURCES))
        raise SourceError(f"{KIND_LABELS.get(kind, kind)} has no ticket search: upload a file instead, "
                          f"or set HELPDESK_KIND={searchable}")
    return source.fetch_tickets(query, limit=limit)
