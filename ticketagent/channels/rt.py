"""Request Tracker 5 through REST2 (HELPDESK_KIND=rt): each action as RT calls, the key in a custom field and content.

RT has no idempotency keys (REST2 ignores `Idempotency-Key`), so every write
carries the effect's key in two places RT stores with the transaction:

* the transaction custom field (RT_CUSTOM_FIELD, `IdempotencyKey`), a fast
  index -- but RT sets it only after the reply is committed and mailed, and
  silently not at all without the rights, so it never proves absence;
* a marker in the content: the text/html body ends with an HTML comment
  holding the key on a line of its own. RT stores it byte for byte (finds it
  with `Content LIKE`) and does not mail it to the customer.

Actions, in the order of their writes (docs/channels.md):

    notify_customer  POST /ticket/N/correspond                       (the customer is mailed)
    save_draft       POST /ticket/N/comment, marked as a draft      (private: RT has no drafts)
    set_status       GET /ticket/N, the key comment, PUT /ticket/N {Status}, read back
    escalate         GET /ticket/N, the key comment, PUT /ticket/N {Queue, Owner, Priority}, read back
    close_ticket     GET /ticket/N, the key comment, PUT /ticket/N {Status: resolved}, read back

A ticket change cannot carry a key, so its key comment comes first and names
the change (`rt_lookup.change_marker`); the change is sent only once RT has
answered that comment. A look-up then finds the comment, and the change in
the ticket's history after it: a change that landed is found even when its
answer and its read-back were lost. The ticket is read before the change
(so a change that lands only in part is told from one that did not land:
`unknown` with what landed, not `failed`) and read back after it (a PUT
answers 200 whatever happened).

Look-up (`rt_lookup.rt_lookup`): the custom field, then `Content LIKE` on the
ticket's replies and comments, then the ticket's replies and comments read
one by one (which needs no full-text search and sees writes an index has not
caught up with); for a change's key comment, the ticket's history after it.
"Not found" only when all of them answered in full.
"""

import html
import re
from urllib.parse import quote

from django.conf import settings

from ledger.channels.base import (
    Abilities,
    CallResult,
    Cause,
    Channel,
    LookupResult,
    answered_at_all,
    committed,
    failed,
    unknown,
)
from ticketagent.channels.identity import IdentityUnknown
from ticketagent.channels.rt_check import hyperlinks, run_checks
from ticketagent.channels.rt_lookup import change_marker, rt_lookup
from ticketagent.channels.rt_rest import (
    SYSTEM,
    Attempt,
    Reader,
    RTConfig,
    Stop,
    Unanswered,
    location_id,
    not_rt_words,
    path_with,
    rt_message,
    rt_refusal,
)

KEY_MARKER = "ticketagent-key"
KEY_PATTERN = re.compile(r"<!--\s*" + KEY_MARKER + r":\s*([A-Za-z0-9._:-]+)\s*-->")
RESOLVED = "resolved"
WHAT = {"correspond": "reply", "comment": "comment"}


def key_marker(key: str) -> str:
    """The marker that ends every body: the key on a line of its own, so RT's
    quoted-printable storage of non-ASCII text (76-character lines) never
    splits it and `Content LIKE` finds it."""
    return f"\n<!-- {KEY_MARKER}:\n{key}\n-->\n"


def keys_in(content: str) -> list[str]:
    """The keys of the markers in a stored body."""
    return KEY_PATTERN.findall(content or "")


def text_html(text: str) -> str:
    """Plain text as HTML paragraphs (escaped)."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", (text or "").strip()) if p.strip()]
    return "\n".join("<p>" + html.escape(p).replace("\n", "<br>\n") + "</p>" for p in paragraphs)


def ticket_number(value) -> str | None:
    """RT's ticket id from the upload's ticket_id, or None when it cannot be one."""
    text = str(value or "").strip()
    return text if text.isdigit() and int(text) > 0 else None


def _shown(ticket: dict, field: str) -> str:
    have = ticket.get(field)
    if isinstance(have, dict):
        return str(have.get("Name") or have.get("id") or "")
    return str(have if have is not None else "")


def _changed(before: dict, now: dict, want: dict) -> list[str]:
    """The wanted fields whose value the action changed: "Priority 100"."""
    return [f"{field} {_shown(now, field) or 'empty'}" for field in want
            if _shown(now, field).lower() != _shown(before, field).lower()]


def _differences(ticket: dict, want: dict) -> list[str]:
    """The wanted values the ticket read back does not have (a queue or an
    owner matches by name or id, case-insensitively, as RT compares them)."""
    wrong = []
    for field, value in want.items():
        have = ticket.get(field)
        names = {str(have.get(k) or "").lower() for k in ("Name", "id")} if isinstance(have, dict) \
            else {str(have if have is not None else "").lower()}
        if str(value).lower() not in names:
            shown = (have.get("Name") or have.get("id")) if isinstance(have, dict) else have
            wrong.append(f"{field} is {shown or 'empty'}, not {value}")
    return wrong


class RTChannel(Channel):
    name = "helpdesk"
    label = "Request Tracker 5 (REST2)"

    def __init__(self, **overrides):
        self.config = RTConfig.from_settings(**overrides)
        cf = self.config.custom_field
        self.abilities = Abilities(
            key_carried=f"transaction custom field {cf} and an HTML-comment marker in the content",
            honours_key=False,
            lookup=f"CF.{{{cf}}} search, Content LIKE on the ticket, then its replies and comments read; a "
                   "ticket change: the ticket's history after its key comment")

    @property
    def in_flight_seconds(self) -> float:
        return float(settings.HELPDESK_UPSTREAM_TIMEOUT)

    @property
    def max_call_seconds(self) -> float:
        # every request of an action starts before the action's budget is
        # spent, and none outlasts one request's timeouts
        return self.budget_seconds + self.config.request_seconds

    @property
    def budget_seconds(self) -> float:
        # room for one read that timed out to be asked again, and the rest of the action after it
        return 2 * self.config.request_seconds

    # -- perform ---------------------------------------------------------------
    def perform(self, spec, payload, key, deadline) -> CallResult:
        ticket = ticket_number(payload.get("ticket"))
        if ticket is None:
            return failed(f"{payload.get('ticket')!r} is not a {SYSTEM} ticket id (a number)", answered=False,
                          cause=Cause.INVALID)
        body = payload.get("body") or {}
        attempt = Attempt(self.config, self.budget_seconds, deadline)
        action = {"notify_customer": self._notify, "save_draft": self._draft, "set_status": self._status,
                  "escalate": self._escalate, "close_ticket": self._close}[spec.name]
        try:
            return action(attempt, ticket, body, key)
        except Stop as stop:
            return stop.result

    def _notify(self, at: Attempt, ticket: str, body: dict, key: str) -> CallResult:
        return self._write(at, ticket, "correspond", text_html(body.get("body", "")), key)

    def _draft(self, at: Attempt, ticket: str, body: dict, key: str) -> CallResult:
        head = ("<p><strong>Draft reply by the ticket agent: not sent to the customer.</strong><br>\n"
                f"Subject: {html.escape(body.get('subject', ''))}</p>\n")
        return self._write(at, ticket, "comment", head + text_html(body.get("body", "")), key)

    def _status(self, at: Attempt, ticket: str, body: dict, key: str) -> CallResult:
        status = str(body.get("status", ""))
        target = self.config.statuses.get(status)
        if not target:
            return failed(f"no {SYSTEM} status for {status!r}: see RT_STATUSES", answered=False, cause=Cause.INVALID)
        note = (f"<p>The ticket agent sets the status to <code>{html.escape(target)}</code> "
                f"({html.escape(status)}).</p>")
        return self._changing(at, ticket, {"Status": target}, note, key)

    def _escalate(self, at: Attempt, ticket: str, body: dict, key: str) -> CallResult:
        c = self.config
        # the queue and owner the playbook names for the ticket (its rule's or its category's: the payload's), else
        # RT_ESCALATION_QUEUE and RT_ESCALATION_OWNER
        want = {field: value for field, value in (("Queue", body.get("queue") or c.escalation_queue),
                                                  ("Owner", body.get("owner") or c.escalation_owner),
                                                  ("Priority", c.escalation_priority)) if value not in ("", None)}
        if not want:
            return failed("escalate has nothing to change: name an RT queue or owner in the playbook's category or "
                          "rule, or set RT_ESCALATION_QUEUE, RT_ESCALATION_OWNER or RT_ESCALATION_PRIORITY",
                          answered=False, cause=Cause.INVALID)
        self._target_known(at, str(body.get("queue") or ""), str(body.get("owner") or ""))
        done = ", ".join(f"{field} {value}" for field, value in want.items())
        note = (f"<p>The ticket agent escalates this ticket ({html.escape(done)}):</p>\n"
                + text_html(str(body.get("note", ""))))
        return self._changing(at, ticket, want, note, key)

    def _target_known(self, at: Attempt, queue: str, owner: str) -> None:
        """The playbook's queue (one the ticket may be moved into: CreateTicket there) and owner for the ticket,
        read before anything is written: one RT does not have (a typo in the playbook) fails the escalation with
        nothing sent, instead of moving the ticket in part. (The settings' are verified by `check()`.)"""
        user, problem = self.config.user, ""
        if queue:
            answer = at.send("GET", "/queue/" + quote(queue, safe=""), write=False)
            if answer.status != 200:
                problem = (f"no queue {queue!r} visible to {user!r} (it does not exist, or {user!r} lacks SeeQueue "
                           f"there; RT answered {answer.status})")
            elif "create" not in hyperlinks(answer.json(None)):
                problem = (f"{user!r} lacks CreateTicket in queue {queue!r}: RT moves a ticket into a queue only for "
                           "a user who may create tickets there")
        if owner and not problem:
            answer = at.send("GET", "/user/" + quote(owner, safe=""), write=False)
            if answer.status != 200:
                problem = f"no {SYSTEM} user {owner!r} (RT answered {answer.status}: {rt_message(answer)})"
        if problem:
            raise Stop(failed(f"the playbook's escalation target: {problem}; nothing was sent", answered=True,
                              cause=Cause.INVALID))

    def _close(self, at: Attempt, ticket: str, body: dict, key: str) -> CallResult:
        note = "<p>The ticket agent resolves this ticket.</p>\n" + text_html(str(body.get("reason", "")))
        return self._changing(at, ticket, {"Status": RESOLVED}, note, key)

    def _changing(self, at: Attempt, ticket: str, want: dict, note: str, key: str) -> CallResult:
        """A ticket change: the ticket read, the key comment naming the change, then the change, read
        back. The reference is the key comment's transaction."""
        before = self._read(at, ticket, first=True)
        ref = self._announce(at, ticket, want, note, key)
        self._change(at, ticket, want, before)
        return committed(ref)

    def _announce(self, at: Attempt, ticket: str, want: dict, note: str, key: str) -> str:
        """The key comment that comes before a change: its transaction id. Until RT has answered it the
        change is not sent, so any end here is `failed` -- the change provably did not happen (the
        comment may have landed: the look-up finds no change after it)."""
        body = {"Content": note + change_marker(want) + key_marker(key), "ContentType": "text/html",
                "TxnCustomFields": {self.config.custom_field: key}}
        not_sent = "; the change was not sent"
        try:
            answer = at.send("POST", f"/ticket/{ticket}/comment", body, write=False)
        except Stop as stop:
            raise Stop(failed(stop.result.error + not_sent, answered=stop.result.answered,
                              cause=stop.result.cause)) from None
        if answer.ok:
            return location_id(answer)
        if not rt_refusal(answer):  # a gateway's 5xx, not RT's words: the helpdesk was unavailable
            raise Stop(failed(f"the key comment on ticket {ticket}: {not_rt_words(answer)}{not_sent}",
                              answered=True, cause=Cause.UNAVAILABLE))
        raise Stop(failed(f"{SYSTEM} refused the key comment on ticket {ticket} ({answer.status}: "
                          f"{rt_message(answer)}){not_sent}", answered=True, cause=Cause.REFUSED))

    def _write(self, at: Attempt, ticket: str, kind: str, content: str, key: str) -> CallResult:
        """A reply or comment carrying the key in the custom field and the marker."""
        body = {"Content": content + key_marker(key), "ContentType": "text/html",
                "TxnCustomFields": {self.config.custom_field: key}}
        answer = at.send("POST", f"/ticket/{ticket}/{kind}", body, write=True)
        if answer.ok:
            return committed(location_id(answer))
        # RT answers 400 "Permission Denied" for a ticket that does not exist
        if answer.status in (400, 403, 404) and self._missing(ticket):
            return failed(f"ticket {ticket} does not exist in {SYSTEM}", answered=True, cause=Cause.REFUSED)
        if not rt_refusal(answer):
            return unknown(f"POST /ticket/{ticket}/{kind} {not_rt_words(answer)}", answered=True)
        return failed(f"{SYSTEM} refused the {WHAT[kind]} on ticket {ticket} ({answer.status}: "
                      f"{rt_message(answer)})", answered=True, cause=Cause.REFUSED)

    def _missing(self, ticket: str) -> bool:
        """True only when RT says the ticket does not exist (404)."""
        try:
            return Reader(self.config, attempts=1).get(f"/ticket/{ticket}").status == 404
        except Unanswered:
            return False

    def _change(self, at: Attempt, ticket: str, want: dict, before: dict) -> None:
        """Set ticket fields and read them back (a PUT answers 200 whatever
        happened). A ticket someone else owns changes owner only after a
        steal. Raises Stop unless every value is in place: `failed` when the
        ticket read back shows none of it changed since `before`, `unknown`
        when part of it landed (the error says which part did and which did not)."""
        said = self._put(at, f"/ticket/{ticket}", want, ticket)
        now = self._read(at, ticket)
        wrong = _differences(now, want)
        owner = str((now.get("Owner") or {}).get("id", "")).lower() if isinstance(now.get("Owner"), dict) else ""
        if any(w.startswith("Owner ") for w in wrong) and owner not in ("", "nobody", self.config.user.lower()):
            said += self._put(at, f"/ticket/{ticket}/steal", {}, ticket)
            said += self._put(at, f"/ticket/{ticket}", {"Owner": want["Owner"]}, ticket)
            now = self._read(at, ticket)
            wrong = _differences(now, want)
        if not wrong:
            return
        landed = _changed(before, now, want)
        told = f"{'; '.join(wrong)} (it said: {'; '.join(said) or 'nothing'})"
        if not landed:
            raise Stop(failed(f"{SYSTEM} did not make the change on ticket {ticket}: {told}; read back, nothing of "
                              "it changed", answered=True, cause=Cause.REFUSED))
        raise Stop(unknown(f"{SYSTEM} made only part of the change on ticket {ticket}: landed: "
                           f"{', '.join(landed)}; not landed: {told}", answered=True))

    def _put(self, at: Attempt, path: str, fields: dict, ticket: str) -> list[str]:
        answer = at.send("PUT", path, fields, write=True)
        if not answer.ok and not rt_refusal(answer):
            raise Stop(unknown(f"PUT {path} {not_rt_words(answer)}", answered=True))
        if answer.status == 404 and not at.landed:
            raise Stop(failed(f"ticket {ticket} does not exist in {SYSTEM}", answered=True, cause=Cause.REFUSED))
        if not answer.ok:  # RT's refusal: `failed` only when no earlier write of the action landed
            raise Stop(at.ended(f"{SYSTEM} refused PUT {path} ({answer.status}: {rt_message(answer)})",
                                cause=Cause.REFUSED))
        said = answer.json([])
        return [str(m) for m in said] if isinstance(said, list) else []

    def _read(self, at: Attempt, ticket: str, *, first: bool = False) -> dict:
        answer = at.send("GET", path_with(f"/ticket/{ticket}", **{"fields[Queue]": "Name", "fields[Owner]": "Name"}),
                         write=False)
        data = answer.json(None)
        if first and answer.status == 404:
            raise Stop(failed(f"ticket {ticket} does not exist in {SYSTEM}", answered=True, cause=Cause.REFUSED))
        if answer.status != 200 or not isinstance(data, dict):
            what = "reading ticket" if first else "reading ticket back"
            # a 4xx is RT's (or a proxy's) refusal to show it; a 200 that is not a ticket, no usable answer
            cause = Cause.REFUSED if 400 <= answer.status < 500 else Cause.UNAVAILABLE
            raise Stop(at.ended(f"{what} {ticket} answered {answer.status}: {rt_message(answer)}", cause=cause))
        return data

    # -- lookup ----------------------------------------------------------------
    def lookup(self, key, payload) -> LookupResult:
        ticket = ticket_number(payload.get("ticket"))
        if ticket is None:
            return LookupResult(False, detail=f"{payload.get('ticket')!r} is not a {SYSTEM} ticket id: "
                                              "nothing was written")
        reader = Reader(self.config, attempts=1)  # one that cannot tell is asked again by the sweep
        try:
            return rt_lookup(reader, self.config.custom_field, ticket, key)
        except Unanswered as exc:
            return LookupResult(None, detail=f"{SYSTEM} look-up could not tell: {exc}")

    # -- check -----------------------------------------------------------------
    def probe(self) -> str:
        try:
            answer = Reader(self.config, attempts=1).get("/rt")
        except Unanswered as exc:
            return str(exc)
        return "" if answered_at_all(answer.status) else f"GET /rt answered {answer.status}: {rt_message(answer)}"

    def identity(self) -> str:
        """Which RT answers (`identity.IdentityUnknown` if none does): the moment its database was initialised,
        as RT reports it -- the creation time of queue 1 ("General", created by RT_System with the database;
        renaming or disabling it keeps it). An agent not allowed to see that queue knows RT by its URL."""
        reader = Reader(self.config, attempts=1)
        try:
            answer = reader.get("/queue/1")
        except Unanswered as exc:
            raise IdentityUnknown(str(exc)) from None
        data = answer.json({})
        created = data.get("Created") if answer.status == 200 and isinstance(data, dict) else None
        if created:
            return f"rt|initialised {created}"
        if answer.status in (403, 404):
            return f"rt|url|{self.config.url}"
        raise IdentityUnknown(f"GET /queue/1 answered {answer.status}: {rt_message(answer)}")

    def check(self) -> list[str]:
        return self.check_report().problems

    def check_report(self):
        """The check's problems and what it could not verify yet (`rt_check.Report`)."""
        return run_checks(self.config, Reader(self.config))
