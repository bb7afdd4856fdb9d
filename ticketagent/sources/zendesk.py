"""Tickets from Zendesk as upload rows: from a view (`view:123`) or a search query, page by page up to a limit.

    fetch_tickets("view:360001234", limit=500)
    fetch_tickets("status<solved tags:billing", limit=200)   # "type:ticket" is added

Calls (Zendesk Support API, configured like the Zendesk channel:
HELPDESK_URL, HELPDESK_USER, HELPDESK_TOKEN):

* a view: `GET /api/v2/views/{id}/tickets.json?page[size]=...` (cursor
  pagination, https://developer.zendesk.com/api-reference/ticketing/business-rules/views/#list-tickets-from-a-view);
* a search: `GET /api/v2/search.json?query=type:ticket ...&per_page=...`
  (offset pagination only; at most 1,000 results per query, so `limit` is
  capped at 1,000 for a search;
  https://developer.zendesk.com/api-reference/ticketing/ticket-management/search/);
* the requesters: side-loaded (`include=users` for a view,
  `include=tickets(users)` for a search; https://developer.zendesk.com/documentation/ticketing/using-the-zendesk-api/side_loading/),
  and whoever was not side-loaded through `GET /api/v2/users/show_many.json?ids=...`.

A row: `ticket_id` the Zendesk ticket id; `customer_email` / `customer_name`
the requester's; `subject`; `body` the ticket's description (its first
comment); `priority` Zendesk's (low, normal, high, urgent, the upload's
own values; none -> normal); `language` the requester's locale;
`metadata` where the row came from and the ticket's Zendesk status, tags
and group. A ticket whose requester has no email address cannot become a
row (no reply could reach them): the whole query is refused, naming it.

Every failure is a `SourceError` in words: the credentials refused (401/403),
an unknown view (404), a query Zendesk refuses (400/422), the server not
reachable or not answering, a rate limit longer than
ZENDESK_RATE_LIMIT_MAX_WAIT. Nothing partial is returned.
"""

import re
from urllib.parse import urlencode

from ledger.channels.redact import redact
from ticketagent.channels.zendesk_api import API, MAX_PAGE_SIZE, PageError, ZendeskConfig, iter_pages, make_client
from ticketagent.sources import SourceError

SEARCH_LIMIT = 1000  # "The Search API returns up to 1,000 results per query"
USERS_PER_CALL = 100  # users/show_many takes at most 100 ids
PRIORITIES = ("low", "normal", "high", "urgent")


def fetch_tickets(query: str, *, limit: int, config: ZendeskConfig | None = None) -> list[dict]:
    """One dict per ticket with the upload columns, from `view:<id>` or a Zendesk search; at most `limit`."""
    if not isinstance(limit, int) or limit < 1:
        raise SourceError(f"the limit must be a whole number of at least 1, not {limit!r}")
    query = (query or "").strip()
    if not query:
        raise SourceError("the Zendesk query is empty: give a view (view:<its id>) or a search, e.g. status<solved")
    config = config or ZendeskConfig.from_settings()
    if not config.token or not config.user:
        raise SourceError("HELPDESK_USER (the agent's email) and HELPDESK_TOKEN (an API token) must both be set")
    client = make_client(config)
    if query.lower().startswith("view:"):
        tickets, users = view_tickets(client, config, query[len("view:"):].strip(), limit)
        origin = {"zendesk_view": query[len("view:"):].strip()}
    else:
        tickets, users = search_tickets(client, config, query, limit)
        origin = {"zendesk_search": query}
    wanted = {t.get("requester_id") for t in tickets if t.get("requester_id") is not None}
    users.update(fetch_users(client, config, wanted - set(users)))
    return rows(tickets, users, origin)


def view_tickets(client, config, view: str, limit: int) -> tuple[list[dict], dict]:
    if not view.isascii() or not view.isdigit():
        raise SourceError(f"view:{view} is not a view: write view:<the view's number>, e.g. view:360001234")
    path = f"{API}/views/{view}/tickets.json?" + urlencode({"page[size]": min(MAX_PAGE_SIZE, limit),
                                                          "include": "users"})
    return collect(client, config, path, key="tickets", limit=limit, what=f"the tickets of view {view}",
                   thing=f"view {view}")


def search_tickets(client, config, query: str, limit: int) -> tuple[list[dict], dict]:
    kinds = re.findall(r"(?i)\btype:(\S+)", query)
    if any(kind.lower() != "ticket" for kind in kinds):
        raise SourceError(f"the search {query!r} asks for {', '.join(kinds)}: only tickets can become rows")
    search = query if kinds else f"type:ticket {query}"
    limit = min(limit, SEARCH_LIMIT)
    path = f"{API}/search.json?" + urlencode({"query": search, "per_page": min(MAX_PAGE_SIZE, limit),
                                             "include": "tickets(users)"})
    return collect(client, config, path, key="results", limit=limit, what=f"the search {search!r}",
                   thing=f"search endpoint for {search!r}")


def collect(client, config, path: str, *, key: str, limit: int, what: str, thing: str) -> tuple[list[dict], dict]:
    """The tickets of every page (up to `limit`) and the users side-loaded with them."""
    tickets: list[dict] = []
    users: dict = {}
    try:
        for page in iter_pages(client, path, what=what, thing=thing, max_wait=config.max_wait):
            items = page.get(key)
            if not isinstance(items, list):
                raise SourceError(f"Zendesk's answer to {what} has no {key!r} list")
            users.update(side_loaded(page))
            tickets += [t for t in items if isinstance(t, dict) and isinstance(t.get("id"), int)
                        and t.get("result_type", "ticket") == "ticket"]
            if len(tickets) >= limit:
                break
    except PageError as exc:
        raise SourceError(failure(exc, config)) from exc
    return tickets[:limit], users


def side_loaded(page: dict) -> dict:
    found = page.get("users")
    if not isinstance(found, list):
        return {}
    return {u["id"]: u for u in found if isinstance(u, dict) and u.get("id") is not None}


def fetch_users(client, config, ids: set) -> dict:
    """The users with these ids, 100 a call (users/show_many)."""
    users: dict = {}
    ordered = sorted(i for i in ids if isinstance(i, int))
    for start in range(0, len(ordered), USERS_PER_CALL):
        chunk = ordered[start:start + USERS_PER_CALL]
        path = f"{API}/users/show_many.json?" + urlencode({"ids": ",".join(map(str, chunk))})
        try:
            for page in iter_pages(client, path, what="the requesters (users/show_many)", thing="users",
                                   max_wait=config.max_wait):
                users.update(side_loaded(page))
        except PageError as exc:
            raise SourceError(failure(exc, config)) from exc
    return users


def failure(exc: PageError, config: ZendeskConfig) -> str:
    text = str(exc)
    if exc.status is None and "could not connect" in text:
        text = f"{text} (HELPDESK_URL={config.url})"
    return redact(text)


def rows(tickets: list[dict], users: dict, origin: dict) -> list[dict]:
    """The upload rows, or a `SourceError` naming every ticket that cannot be one."""
    out, problems = [], []
    for ticket in tickets:
        requester = users.get(ticket.get("requester_id")) or {}
        email = requester.get("email")
        if not email:
            problems.append(f"ticket {ticket.get('id')}: its requester (user {ticket.get('requester_id')}) has "
                            f"no email address, so no reply could reach them")
            continue
        if not str(ticket.get("description") or "").strip():
            problems.append(f"ticket {ticket.get('id')}: it has no description (first comment) to answer")
            continue
        out.append(row(ticket, requester, origin))
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise SourceError(f"{len(problems)} of the {len(tickets)} Zendesk tickets cannot become rows: {shown}. "
                          f"Narrow the view or search to leave them out.")
    return out


def row(ticket: dict, requester: dict, origin: dict) -> dict:
    priority = ticket.get("priority")
    return {
        "ticket_id": str(ticket["id"]),
        "customer_email": requester["email"],
        "customer_name": requester.get("name") or "",
        "subject": str(ticket.get("subject") or ticket.get("raw_subject") or "").strip() or "(no subject)",
        "body": str(ticket["description"]),
        "priority": priority if priority in PRIORITIES else "normal",
        "language": str(requester.get("locale") or ""),
        "metadata": {"source": "zendesk", **origin, "zendesk_status": ticket.get("status"),
                     "zendesk_tags": ticket.get("tags") or [], "zendesk_group_id": ticket.get("group_id")},
    }
