"""Request Tracker as a ticket source: a TicketSQL search, each ticket as an upload row with RT's ticket id.

    fetch_tickets("Queue = 'General' AND Status = 'new'", limit=500)

One `GET /tickets` page per 100 tickets (subject, first requestor, queue,
status and priority inline), one transaction search per 100 tickets for
their Create transactions, and per ticket the list of that transaction's
parts and the text part itself (`GET /attachment/N`): a customer's attached
files are never downloaded. The connection and the credentials are those of
the RT channel (HELPDESK_URL, HELPDESK_USER, HELPDESK_PASSWORD).
"""

import base64
import html
import re

from ledger.channels.redact import redact
from ticketagent.channels.rt_rest import PER_PAGE, SYSTEM, Reader, RTConfig, Unanswered, answered_by, rt_message
from ticketagent.sources import SourceError

# RT's numeric priority -> the upload's priority (RT 5 shows 0 as Low, 50 as Medium, 100 as High)
PRIORITY_FLOORS = ((90, "urgent"), (65, "high"), (25, "normal"))


def priority_word(value) -> str:
    try:
        number = int(str(value).strip() or 0)
    except ValueError:
        return "normal"
    return next((word for floor, word in PRIORITY_FLOORS if number >= floor), "low")


def html_text(text: str) -> str:
    """The text of an HTML body: line breaks kept, tags dropped, entities decoded."""
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", "", text)
    text = re.sub(r"(?i)<br\s*/?>|</p\s*>|</div\s*>|</li\s*>", "\n", text)
    text = re.sub(r"(?s)<!--.*?-->|<[^>]+>", "", text)
    return re.sub(r"\n{3,}", "\n\n", html.unescape(text)).strip()


def _read(reader: Reader, path: str, what: str, **params) -> dict:
    """A JSON answer, or SourceError saying why not in an operator's words."""
    try:
        answer = reader.get(path, **params)
    except Unanswered as exc:
        raise SourceError(redact(f"{exc} (at {reader.config.url})")) from None
    if answer.status == 401:
        raise SourceError(f"{SYSTEM} refused the credentials (401): check HELPDESK_USER and HELPDESK_PASSWORD")
    message = re.sub(r"\s+at /\S+ line \d+\.?\s*$", "", rt_message(answer))
    if answer.status == 400 and path == "/tickets" and answer.json(None) is not None:
        raise SourceError(redact(f"{SYSTEM} rejected the TicketSQL query: {message}"))
    data = answer.json(None)
    if answer.status != 200 or not isinstance(data, dict):
        tries = f" (tried {reader.attempts} times)" if answer.status >= 500 else ""
        raise SourceError(redact(f"{answered_by(answer, what)}{tries}"))
    return data


def _search(reader: Reader, query: str, limit: int) -> list[dict]:
    tickets: list[dict] = []
    for page in range(1, limit // PER_PAGE + 2):
        data = _read(reader, "/tickets", "the ticket search", query=query, page=page, per_page=PER_PAGE,
                     orderby="id", order="ASC", fields="Subject,Requestor,Queue,Status,Priority",
                     **{"fields[Requestor]": "EmailAddress,RealName", "fields[Queue]": "Name"})
        items = data.get("items") or []
        tickets += items
        if len(items) < PER_PAGE or len(tickets) >= limit:
            break
    return tickets[:limit]


def _create_transactions(reader: Reader, ids: list[str]) -> dict[str, str]:
    """ticket id -> its Create transaction's id (the lowest, should a merge have brought others)."""
    found: dict[str, str] = {}
    for start in range(0, len(ids), PER_PAGE // 2):  # room for tickets merged from others
        chunk = " OR ".join(f"ObjectId = {int(i)}" for i in ids[start:start + PER_PAGE // 2])
        data = _read(reader, "/transactions", "the search for the tickets' first messages",
                     query=f"ObjectType = 'RT::Ticket' AND Type = 'Create' AND ({chunk})", fields="ObjectId",
                     per_page=PER_PAGE, orderby="id", order="DESC")
        for txn in data.get("items") or []:
            found[str(txn.get("ObjectId"))] = str(txn.get("id"))
    return found


def _first_message(reader: Reader, txn: str) -> str:
    """The text of a Create transaction: its text/plain part, else its text/html part as text."""
    parts = _read(reader, f"/transaction/{txn}/attachments", "the list of a message's parts",
                  fields="ContentType,Filename", per_page=PER_PAGE).get("items") or []
    for wanted in ("text/plain", "text/html"):
        part = next((p for p in parts if str(p.get("ContentType", "")).lower() == wanted and not p.get("Filename")),
                    None)
        if part is None:
            continue
        data = _read(reader, f"/attachment/{int(part['id'])}", "a message part")
        text = base64.b64decode(data.get("Content") or "").decode("utf-8", "replace")
        return html_text(text) if wanted == "text/html" else text.strip()
    return ""


def _row(ticket: dict, body: str) -> dict:
    requestors = [r for r in ticket.get("Requestor") or [] if isinstance(r, dict)]
    first = requestors[0] if requestors else {}
    queue = ticket.get("Queue") if isinstance(ticket.get("Queue"), dict) else {}
    return {
        "ticket_id": str(ticket.get("id", "")),
        "customer_email": first.get("EmailAddress") or "",
        "customer_name": first.get("RealName") or "",
        "subject": ticket.get("Subject") or "",
        "body": body,
        "priority": priority_word(ticket.get("Priority")),
        "language": "",
        "metadata": {"queue": queue.get("Name") or str(queue.get("id", "")), "status": ticket.get("Status") or ""},
    }


def fetch_tickets(query: str, *, limit: int) -> list[dict]:
    """The tickets a TicketSQL query finds (at most `limit`, oldest first), as upload rows."""
    reader = Reader(RTConfig.from_settings())
    tickets = _search(reader, query, max(1, limit))
    creates = _create_transactions(reader, [str(t.get("id")) for t in tickets])
    rows = []
    for ticket in tickets:
        txn = creates.get(str(ticket.get("id")))
        rows.append(_row(ticket, _first_message(reader, txn) if txn else ""))
    return rows
