"""The Request Tracker channel's check, writing nothing: credentials, queues, rights, custom field, full-text search.

What it verifies, with the reads that show it:

* REST2 answers at HELPDESK_URL + /REST/2.0 and takes the credentials (`GET /rt`);
* the user sees queues (SeeQueue) and, in each, the transaction custom field
  (`GET /queue/N` lists it only where it is applied and the user has
  SeeCustomField);
* on the newest ticket of each queue, the user may read it (ShowTicket),
  reply (ReplyToTicket), comment (CommentOnTicket) and change its status
  (ModifyTicket): REST2 offers those links only to a user who may use them;
* what `escalate` changes exists (the queue, the owner);
* full-text search is on: a condition on `Content` finds a transaction known
  to have content (without it RT silently turns the condition into `id = 0`).

ModifyCustomField and ShowTicketComments cannot be seen without writing;
docs/channels.md says what their absence costs.
"""

import uuid

from ledger.channels.rt_rest import SYSTEM, Reader, RTConfig, Unanswered, rt_message

MAX_QUEUES = 20  # queues checked one by one (the rest: only that they are visible)


def run_checks(config: RTConfig, reader: Reader) -> list[str]:
    """The problems found (empty: ready)."""
    try:
        problem = _reach(config, reader)
        if problem:
            return [problem]
        queues = reader.items("/queues/all", fields="Name")
        if not queues:
            return [f"{SYSTEM} user {config.user!r} sees no queue (SeeQueue)"]
        problems = _queues(config, reader, queues[:MAX_QUEUES])
        problems += _escalation(config, reader, queues)
        problems += _full_text(reader)
    except Unanswered as exc:
        return [f"{SYSTEM} did not answer the check in full: {exc}"]
    return problems


def _reach(config: RTConfig, reader: Reader) -> str:
    try:
        answer = reader.get("/rt")
    except Unanswered as exc:
        return f"could not reach {SYSTEM} at {config.url}: {exc}"
    if answer.status == 401:
        return (f"{SYSTEM} refused the credentials of {config.user or '(no HELPDESK_USER)'!r} (401): "
                "check HELPDESK_USER and HELPDESK_PASSWORD")
    data = answer.json(None)
    if answer.status != 200 or not isinstance(data, dict) or "Version" not in data:
        return (f"no REST2 API at {config.url} (GET /rt answered {answer.status}): HELPDESK_URL must be RT's base "
                "URL, e.g. https://rt.example.com")
    return ""


def _queues(config: RTConfig, reader: Reader, queues: list[dict]) -> list[str]:
    cf, problems, without_cf = config.custom_field, [], []
    for queue in queues:
        name = queue.get("Name") or queue.get("id")
        fields = reader.json(f"/queue/{queue.get('id')}").get("TicketTransactionCustomFields") or []
        if cf not in {f.get("name") for f in fields if isinstance(f, dict)}:
            without_cf.append(name)
        missing = _ticket_rights(reader, queue.get("id"))
        if missing:
            problems.append(f"in queue {name} (ticket {missing[0]}) {config.user!r} lacks {', '.join(missing[1:])}")
    if without_cf:
        problems.insert(0, f"the transaction custom field {cf!r} is not applied to queue(s) {', '.join(without_cf)}, "
                           f"or {config.user!r} lacks SeeCustomField there (RT_CUSTOM_FIELD)")
    return problems


def _ticket_rights(reader: Reader, queue_id) -> list[str]:
    """[ticket id, missing rights...] for the queue's newest ticket; [] when all are there or it has none."""
    found = reader.json("/tickets", query=f"Queue = {int(queue_id)} AND Status != 'deleted'", per_page=1,
                        orderby="id", order="DESC").get("items") or []
    if not found:
        return []
    ticket = found[0].get("id")
    answer = reader.get(f"/ticket/{ticket}")
    if answer.status != 200:
        return [ticket, f"ShowTicket (GET answered {answer.status}: {rt_message(answer)})"]
    links = {link.get("ref") for link in (answer.json({}) or {}).get("_hyperlinks", []) if isinstance(link, dict)}
    missing = [right for ref, right in (("correspond", "ReplyToTicket"), ("comment", "CommentOnTicket"),
                                        ("lifecycle", "ModifyTicket")) if ref not in links]
    return [ticket, *missing] if missing else []


def _escalation(config: RTConfig, reader: Reader, queues: list[dict]) -> list[str]:
    problems = []
    if not (config.escalation_queue or config.escalation_owner or config.escalation_priority is not None):
        problems.append("escalate has nothing to change: set RT_ESCALATION_QUEUE, RT_ESCALATION_OWNER or "
                        "RT_ESCALATION_PRIORITY")
    if config.escalation_queue:
        names = {str(q.get(k) or "").lower() for q in queues for k in ("Name", "id")}
        if config.escalation_queue.lower() not in names:
            problems.append(f"RT_ESCALATION_QUEUE={config.escalation_queue!r}: no such queue visible to "
                            f"{config.user!r}")
    if config.escalation_owner:
        answer = reader.get(f"/user/{config.escalation_owner}")
        if answer.status != 200:
            problems.append(f"RT_ESCALATION_OWNER={config.escalation_owner!r}: GET /user answered {answer.status} "
                            f"({rt_message(answer)})")
    return problems


def _full_text(reader: Reader) -> list[str]:
    """A transaction known to have content must be found by a condition on
    `Content` (NOT LIKE a string nobody wrote, so the content's encoding
    does not matter)."""
    creates = reader.json("/transactions", query="Type = 'Create' AND ObjectType = 'RT::Ticket'", per_page=5,
                          orderby="id", order="DESC").get("items") or []
    nowhere = f"zq-{uuid.uuid4().hex}"
    for create in creates:
        txn = int(create.get("id"))
        parts = reader.items(f"/transaction/{txn}/attachments", fields="Content")
        if not any(part.get("Content") for part in parts):
            continue
        if reader.search(f"id = {txn} AND Content NOT LIKE '{nowhere}'"):
            return []
        return [f"full-text search is off in {SYSTEM}: a search by content finds nothing, so a reply whose custom "
                "field was not set is found only by reading the ticket's history; set "
                "%FullTextSearch = (Enable => 1, ...) in RT_SiteConfig.pm"]
    return [f"cannot verify that {SYSTEM}'s full-text search is on: none of the newest tickets has content to "
            "search for"]
