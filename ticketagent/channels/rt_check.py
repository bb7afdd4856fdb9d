"""The Request Tracker channel's check, writing nothing: credentials, queues, rights, custom field, full-text search.

What it verifies, with the reads that show it:

* REST2 answers at HELPDESK_URL + /REST/2.0 and takes the credentials (`GET /rt`);
* the user sees queues (SeeQueue) and, in each, the transaction custom field
  (`GET /queue/N` lists it only where it is applied and the user has
  SeeCustomField);
* on the newest ticket of each queue, the user may read it (ShowTicket),
  reply (ReplyToTicket), comment (CommentOnTicket) and change its status
  (ModifyTicket): REST2 offers those links only to a user who may use them;
  a queue with no ticket yet cannot show them, and the report says so;
* what `escalate` changes exists (the queue, the owner), and the user may
  move tickets into the escalation queue (CreateTicket there: `GET /queue/N`
  offers the `create` link only with it);
* full-text search is on: a condition on `Content` finds a transaction known
  to have content (without it RT silently turns the condition into `id = 0`);
  with no ticket content to search yet, the report says it is not verified.

ModifyCustomField and ShowTicketComments cannot be seen without writing;
docs/channels.md says what their absence costs. Each problem names the
right, the queue and the user.
"""

import uuid

from ledger.channels.redact import redact
from ticketagent.channels.rt_rest import SYSTEM, Reader, RTConfig, Unanswered, answered_by, rt_message

MAX_QUEUES = 20  # queues checked one by one (the rest: only that they are visible)
# The rights the agent's RT user needs in every queue it acts in (docs/channels.md, `manage.py rt-setup`).
QUEUE_RIGHTS = ("SeeQueue", "ShowTicket", "ShowTicketComments", "ReplyToTicket", "CommentOnTicket", "ModifyTicket",
                "SeeCustomField", "ModifyCustomField")
# ... and in the escalation queue also: moving a ticket into a queue needs CreateTicket there.
ESCALATION_RIGHTS = ("CreateTicket",)
TICKET_LINKS = (("correspond", "ReplyToTicket"), ("comment", "CommentOnTicket"), ("lifecycle", "ModifyTicket"))


class Report:
    """What the check found: problems (not ready) and what it could not verify yet (ready, said so)."""

    def __init__(self):
        self.problems: list[str] = []
        self.unverified: list[str] = []


def run_checks(config: RTConfig, reader: Reader) -> Report:
    """The check's report (no problems: ready); every text redacted."""
    report = Report()
    try:
        _run(config, reader, report)
    except Unanswered as exc:
        report.problems.append(f"{SYSTEM} did not answer the check in full: {exc}")
    report.problems = [redact(p) for p in report.problems]
    report.unverified = [redact(u) for u in report.unverified]
    return report


def _run(config: RTConfig, reader: Reader, report: Report) -> None:
    problem = reach_problem(config, reader)
    if problem:
        report.problems.append(problem)
        return
    queues = reader.items("/queues/all", fields="Name")
    if not queues:
        report.problems.append(f"{SYSTEM} user {config.user!r} sees no queue: it lacks SeeQueue everywhere")
        return
    _queues(config, reader, queues[:MAX_QUEUES], report)
    _escalation(config, reader, queues, report)
    _full_text(reader, report)


def reach_problem(config: RTConfig, reader: Reader) -> str:
    """Why REST2 cannot be used at the configured URL with the configured credentials ("": it can)."""
    try:
        answer = reader.get("/rt")
    except Unanswered as exc:
        return f"could not reach {SYSTEM} at {config.url}: {exc}"
    if answer.status == 401:
        return (f"{SYSTEM} refused the credentials of {config.user or '(no HELPDESK_USER)'!r} (401): "
                "check HELPDESK_USER and HELPDESK_PASSWORD")
    data = answer.json(None)
    if answer.status == 200 and isinstance(data, dict) and "Version" in data:
        return ""
    if answer.status >= 500 or answer.status in (408, 429):
        return (f"{answered_by(answer, f'GET /rt at {config.url}')} (tried {reader.attempts} times): RT is there "
                "but not answering as it should; HELPDESK_URL is probably right, try again when RT answers")
    if isinstance(data, dict) and answer.status in (400, 403):  # RT's own refusal, in its words
        return f"{answered_by(answer, f'GET /rt at {config.url}')}: the user must be Privileged in RT"
    shown = "an answer that is not RT's REST2" if answer.status == 200 else f"{answer.status}"
    return (f"no REST2 API at {config.url}: GET /rt answered {shown} ({rt_message(answer)[:100]}); "
            "HELPDESK_URL must be RT's base URL, e.g. https://rt.example.com")


def _queues(config: RTConfig, reader: Reader, queues: list[dict], report: Report) -> None:
    cf, without_cf, empty = config.custom_field, [], []
    for queue in queues:
        name = queue.get("Name") or queue.get("id")
        fields = reader.json(f"/queue/{queue.get('id')}").get("TicketTransactionCustomFields") or []
        if cf not in {f.get("name") for f in fields if isinstance(f, dict)}:
            without_cf.append(name)
        seen = _ticket_rights(reader, queue.get("id"))
        if seen is None:
            empty.append(name)
        elif seen[1:]:
            report.problems.append(f"{config.user!r} lacks {', '.join(seen[1:])} in queue {name} "
                                   f"(seen on its ticket {seen[0]})")
    if without_cf:
        report.problems.insert(0, f"the transaction custom field {cf!r} is not applied to queue(s) "
                                  f"{', '.join(without_cf)}, or {config.user!r} lacks SeeCustomField there "
                                  "(RT_CUSTOM_FIELD)")
    if empty:
        report.unverified.append(f"queue(s) {', '.join(empty)} have no ticket yet, so {config.user!r}'s "
                                 f"{', '.join(r for _, r in TICKET_LINKS)} there are seen on the first ticket")


def hyperlinks(record) -> set[str]:
    """The `ref`s of a REST2 record's `_hyperlinks`: what the user may do with it (`create` on a queue: CreateTicket
    there; `correspond`, `comment` on a ticket)."""
    links = record.get("_hyperlinks", []) if isinstance(record, dict) else []
    return {link.get("ref") for link in links if isinstance(link, dict)}


def _ticket_rights(reader: Reader, queue_id) -> list[str] | None:
    """[ticket id, missing rights...] for the queue's newest ticket; None when it has none."""
    found = reader.json("/tickets", query=f"Queue = {int(queue_id)} AND Status != 'deleted'", per_page=1,
                        orderby="id", order="DESC").get("items") or []
    if not found:
        return None
    ticket = found[0].get("id")
    answer = reader.get(f"/ticket/{ticket}")
    if answer.status != 200:
        return [ticket, f"ShowTicket (GET answered {answer.status}: {rt_message(answer)})"]
    links = hyperlinks(answer.json({}))
    return [ticket, *(right for ref, right in TICKET_LINKS if ref not in links)]


def _escalation(config: RTConfig, reader: Reader, queues: list[dict], report: Report) -> None:
    if not (config.escalation_queue or config.escalation_owner or config.escalation_priority is not None):
        report.problems.append("escalate has nothing to change: set RT_ESCALATION_QUEUE, RT_ESCALATION_OWNER or "
                               "RT_ESCALATION_PRIORITY")
    if config.escalation_queue:
        wanted = config.escalation_queue.lower()
        queue = next((q for q in queues if wanted in {str(q.get(k) or "").lower() for k in ("Name", "id")}), None)
        if queue is None:
            report.problems.append(f"RT_ESCALATION_QUEUE={config.escalation_queue!r}: no such queue visible to "
                                   f"{config.user!r} (it does not exist, or {config.user!r} lacks SeeQueue there)")
        else:
            data = reader.json(f"/queue/{queue.get('id')}")
            if "create" not in hyperlinks(data):
                report.problems.append(f"{config.user!r} lacks CreateTicket in queue {data.get('Name') or wanted} "
                                       "(RT_ESCALATION_QUEUE): RT moves a ticket into a queue only for a user who "
                                       "may create tickets there")
    if config.escalation_owner:
        answer = reader.get(f"/user/{config.escalation_owner}")
        if answer.status != 200:
            report.problems.append(f"RT_ESCALATION_OWNER={config.escalation_owner!r}: GET /user answered "
                                   f"{answer.status} ({rt_message(answer)})")


def _full_text(reader: Reader, report: Report) -> None:
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
        if not reader.search(f"id = {txn} AND Content NOT LIKE '{nowhere}'"):
            report.problems.append(
                f"full-text search is off in {SYSTEM}: a search by content finds nothing, so a reply whose custom "
                "field was not set is found only by reading the ticket's history; set "
                "%FullTextSearch = (Enable => 1, ...) in RT_SiteConfig.pm")
        return
    report.unverified.append(f"that {SYSTEM}'s full-text search is on: no ticket visible yet has content to search "
                             "for (%FullTextSearch = (Enable => 1, ...) in RT_SiteConfig.pm)")
