"""The Zendesk Support API as the helpdesk: each action is one ticket update whose audit carries the effect's key.

How an action becomes a call -- always `PUT /api/v2/tickets/{id}.json`, one
request, because one update may set fields and add a comment together
(https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#update-ticket):

    save_draft       a private comment (`public: false`) marked as the agent's draft
    notify_customer  a public comment: Zendesk sends it to the requester
    set_status       `status` (open, pending, hold, solved; see STATUSES) + a private note
    escalate         `group_id` (the playbook's Zendesk group for the ticket -- an id, or
                     a name looked up in GET /api/v2/groups.json -- else
                     ZENDESK_ESCALATION_GROUP_ID) and/or `priority`
                     (ZENDESK_ESCALATION_PRIORITY) + a private note saying why
    close_ticket     `status: solved` + a private note. Not "closed": a closed
                     ticket can never be reopened or updated again (a customer's
                     answer becomes a new follow-up ticket), while Zendesk's own
                     automation closes solved tickets after some days.

Where the key travels: the update's `ticket.metadata`. Zendesk stores up to
1 KB of it on the audit the update creates, as `audit.metadata.custom`
("Setting metadata", https://developer.zendesk.com/documentation/ticketing/managing-tickets/creating-and-updating-tickets/).
An update that changes nothing creates no audit and keeps no metadata, so
every action here adds a comment: each write leaves an audit with the key.

Look-up: `GET /api/v2/tickets/{id}/audits.json` with cursor pagination,
every page, looking for `metadata.custom.ticketagent_key` == the key
(https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/).
Found is authoritative; "not found" only once the last page was read; an
error on any page, or a ticket that is gone (404), is "cannot tell".

Outcomes: 2xx committed; never sent (no connection) failed, Zendesk
unavailable (the item waits for it); a 4xx refusal failed with words naming
the ticket (401/403 point at the credentials, 404 says the ticket does not
exist, 422 gives Zendesk's validation details); 408, 5xx, a timeout or a
dropped connection after sending unknown, Zendesk unavailable.

Rate limits: a 429 was not processed. Its `Retry-After` is waited out once
if it is at most ZENDESK_RATE_LIMIT_MAX_WAIT seconds (default 5), then the
update is sent again; a longer wait, or a second 429, is `failed` with the
reason and Zendesk unavailable -- provably not done, so the item waits and
the step runs again -- instead of holding a worker for minutes.

Idempotency-Key: Zendesk honours it only when creating a ticket
(`POST /api/v2/tickets`, https://developer.zendesk.com/api-reference/ticketing/introduction/#idempotency),
not on updates; no action here creates a ticket, so none is sent and the
channel declares `honours_key=False`: exactly-once rests on the ledger and
on finding the write again by the key in its audit.

Why not the `zenpy` client: its Ticket model has no `metadata` field, it
sleeps through every `Retry-After` (blocking the worker), and `requests`
raises one ConnectionError for "could not connect" and "connection lost
after sending" -- the difference between failed and unknown. So the channel
speaks HTTP through `ledger.channels.http`.
"""

import time
from urllib.parse import urlencode

from django.conf import settings

from ledger.channels.base import Abilities, Cause, Channel, LookupResult, answered_at_all, committed, failed, unknown
from ledger.channels.http import Answer, NoAnswer, NotSent
from ledger.channels.redact import redact
from ticketagent.channels.zendesk_api import (
    API,
    MAX_PAGE_SIZE,
    PageError,
    ZendeskConfig,
    error_text,
    iter_pages,
    make_client,
    refusal,
    send,
)

# The product's statuses (the decision's allow-list) as Zendesk's: Zendesk
# has new, open, pending, hold, solved, closed. "escalated" is not a status
# there -- escalating is the escalate action (group, priority); the ticket
# stays open for the people it was handed to.
STATUSES = {"open": "open", "pending": "pending", "solved": "solved", "on_hold": "hold", "escalated": "open"}
PRIORITIES = ("low", "normal", "high", "urgent")
KEY_FIELD = "ticketagent_key"
ACTION_FIELD = "ticketagent_action"
DRAFT_MARK = "[Draft reply saved by the ticket agent; not sent to the customer]"


def ticket_number(value) -> int | None:
    """A Zendesk ticket id (a positive integer, optionally written "#123"), or None."""
    text = str(value if value is not None else "").strip().removeprefix("#")
    if not text.isascii() or not text.isdigit() or int(text) == 0:
        return None
    return int(text)


def private_note(text: str) -> dict:
    return {"body": text, "public": False}


def audit_key(audit) -> str:
    """The effect key an audit carries in its custom metadata ("" if none)."""
    if not isinstance(audit, dict):
        return ""
    metadata = audit.get("metadata")
    custom = metadata.get("custom") if isinstance(metadata, dict) else None
    key = custom.get(KEY_FIELD) if isinstance(custom, dict) else None
    return key if isinstance(key, str) else ""


class ZendeskChannel(Channel):
    """The helpdesk channel for HELPDESK_KIND=zendesk (see the module docstring)."""

    name = "helpdesk"
    label = "Zendesk Support API"
    abilities = Abilities(
        key_carried="audit metadata of the ticket update (metadata.custom.ticketagent_key)",
        honours_key=False,
        lookup="the ticket's audits, every page (GET /api/v2/tickets/{id}/audits.json), searched for the key",
    )

    def __init__(self, config: ZendeskConfig | None = None, *, escalation_group_id: int | None = None,
                 escalation_priority: str | None = None, sleep=time.sleep):
        self.config = config or ZendeskConfig.from_settings()
        self.client = make_client(self.config)
        self.sleep = sleep
        self.escalation_group_id = (escalation_group_id if escalation_group_id is not None
                                    else int(getattr(settings, "ZENDESK_ESCALATION_GROUP_ID", 0) or 0))
        priority = (escalation_priority if escalation_priority is not None
                    else getattr(settings, "ZENDESK_ESCALATION_PRIORITY", "high"))
        self.escalation_priority = priority if priority in PRIORITIES else ""  # "keep": leave it

    @property
    def in_flight_seconds(self) -> float:
        return float(settings.HELPDESK_UPSTREAM_TIMEOUT)

    def identity(self) -> str:
        """A Zendesk account is its subdomain: its URL is its identity (nothing to ask)."""
        return f"zendesk|url|{self.config.url.rstrip('/')}"

    @property
    def max_call_seconds(self) -> float:
        # Two attempts at most (one after a short Retry-After) and the wait between.
        return 2 * self.client.max_call_seconds + self.config.max_wait

    # ------------------------------------------------------------------ the write

    def ticket_update(self, action: str, body: dict, key: str, *, group_id: int = 0) -> dict:
        """The `ticket` object of the update for one action, the key in its metadata (`group_id`: escalate's
        group, else ZENDESK_ESCALATION_GROUP_ID's)."""
        if action == "save_draft":
            fields = {"comment": private_note(f"{DRAFT_MARK}\nSubject: {body['subject']}\n\n{body['body']}")}
        elif action == "notify_customer":
            fields = {"comment": {"body": body["body"], "public": True}}
        elif action == "set_status":
            if body.get("status") not in STATUSES:
                raise ValueError(f"status {body.get('status')!r} has no Zendesk equivalent; "
                                 f"known: {', '.join(sorted(STATUSES))}")
            status = STATUSES[body["status"]]
            fields = {"status": status,
                      "comment": private_note(f"The ticket agent set the status to {status} ({body['status']}).")}
        elif action == "escalate":
            fields = {"comment": private_note(f"Escalated by the ticket agent: {body.get('note', '')}".strip())}
            if group_id or self.escalation_group_id:
                fields["group_id"] = group_id or self.escalation_group_id
            if self.escalation_priority:
                fields["priority"] = self.escalation_priority
        elif action == "close_ticket":
            reason = body.get("reason") or "no reason given"
            fields = {"status": "solved", "comment": private_note(f"Solved by the ticket agent: {reason}")}
        else:
            raise ValueError(f"the Zendesk channel has no mapping for the action {action!r}")
        return {**fields, "metadata": {KEY_FIELD: key, ACTION_FIELD: action}}

    def perform(self, spec, payload, key, deadline):
        ticket = ticket_number(payload.get("ticket"))
        if ticket is None:
            return failed(f"{payload.get('ticket')!r} is not a Zendesk ticket id (a number); nothing was sent",
                          answered=False, cause=Cause.INVALID)
        body, group_id = payload.get("body") or {}, 0
        if spec.name == "escalate" and body.get("group"):  # the playbook's group for the ticket
            group_id, not_found = self.group_id(str(body["group"]))
            if not_found is not None:
                return not_found
        try:
            update = self.ticket_update(spec.name, body, key, group_id=group_id)
        except (KeyError, ValueError) as exc:
            return failed(f"the {spec.name} of ticket {ticket} cannot be sent to Zendesk: {exc}", answered=False,
                          cause=Cause.INVALID)
        try:
            answer = send(self.client, "PUT", f"{API}/tickets/{ticket}.json", {"ticket": update},
                          max_wait=self.config.max_wait, sleep=self.sleep, deadline=deadline)
        except NotSent as exc:
            return failed(f"{exc}; the update of ticket {ticket} was not sent", answered=False,
                          cause=Cause.UNAVAILABLE)
        except NoAnswer as exc:
            return unknown(f"{exc}; the update of ticket {ticket} may have been applied", answered=False,
                           cause=Cause.UNAVAILABLE)
        return self.outcome(answer, ticket)

    def group_id(self, group: str):
        """(the id of the playbook's Zendesk group `group`, None), or (0, why nothing was sent): a number is the
        id; a name is looked up, case-insensitively, among the account's groups (every page)."""
        if group.strip().isdigit():
            return int(group), None
        path = f"{API}/groups.json?" + urlencode({"page[size]": MAX_PAGE_SIZE})
        try:
            for page in iter_pages(self.client, path, what="the groups", thing="the groups",
                                   max_wait=self.config.max_wait, sleep=self.sleep):
                for found in page.get("groups") or []:
                    if isinstance(found, dict) and str(found.get("name", "")).strip().lower() == group.strip().lower():
                        return int(found["id"]), None
        except PageError as exc:
            refused = exc.status is not None and 400 <= exc.status < 500 and exc.status != 429
            return 0, failed(f"the Zendesk group {group!r} could not be looked up: {exc}; nothing was sent",
                             answered=exc.status is not None, cause=Cause.REFUSED if refused else Cause.UNAVAILABLE)
        return 0, failed(f"Zendesk has no group named {group!r} (the playbook's escalation group); nothing was sent",
                         answered=True, cause=Cause.INVALID)

    def outcome(self, answer: Answer, ticket: int):
        what = f"the update of ticket {ticket}"
        if answer.ok:
            data = answer.json({})
            audit = data.get("audit") if isinstance(data, dict) else None
            audit_id = audit.get("id") if isinstance(audit, dict) else None
            return committed(f"ticket {ticket} audit {audit_id}" if audit_id is not None else f"ticket {ticket}")
        if 400 <= answer.status < 500 and answer.status != 408:
            # a 429 beyond the wait was not processed: Zendesk is unavailable for now, it refused nothing
            return failed(refusal(answer, what=what, thing=f"ticket {ticket}", max_wait=self.config.max_wait),
                          answered=True, cause=Cause.UNAVAILABLE if answer.status == 429 else Cause.REFUSED)
        # a 5xx may come from a gateway whose upstream still works on it: it may land still
        return unknown(f"Zendesk (or a gateway in front of it) answered HTTP {answer.status} to {what}, which may "
                       f"have been applied: {error_text(answer)}", answered=answer.status < 500,
                       cause=Cause.UNAVAILABLE)

    # ------------------------------------------------------------------ the look-up

    def lookup(self, key, payload):
        ticket = ticket_number(payload.get("ticket"))
        if ticket is None:
            return LookupResult(False, detail=f"{payload.get('ticket')!r} is not a Zendesk ticket id: "
                                              f"no update can have been sent")
        path = f"{API}/tickets/{ticket}/audits.json?" + urlencode({"page[size]": MAX_PAGE_SIZE})
        read = pages = 0
        try:
            for page in iter_pages(self.client, path, what=f"the audits of ticket {ticket}",
                                   thing=f"ticket {ticket}", max_wait=self.config.max_wait, sleep=self.sleep):
                pages += 1
                audits = page.get("audits")
                if not isinstance(audits, list):
                    raise PageError(f"page {pages} of the audits of ticket {ticket} has no audit list")
                for audit in audits:
                    read += 1
                    if audit_key(audit) == key:
                        ref = f"ticket {ticket} audit {audit.get('id')}"
                        return LookupResult(True, external_ref=ref,
                                            detail=f"found: {ref} carries the key ({read} audits read)")
        except PageError as exc:
            return LookupResult(None, detail=f"cannot tell: the audits of ticket {ticket} were not read to the end "
                                             f"({read} read): {exc}")
        return LookupResult(False, detail=f"not found: none of the {read} audits of ticket {ticket} "
                                          f"({pages} pages, all read) carries the key")

    # ------------------------------------------------------------------ the check

    def probe(self):
        try:
            answer = self.client.request("GET", f"{API}/users/me.json")
        except (NotSent, NoAnswer) as exc:
            return redact(str(exc))
        return "" if answered_at_all(answer.status) else f"Zendesk answered HTTP {answer.status} to users/me"

    def check(self):
        return [redact(problem) for problem in self.problems()]

    def problems(self) -> list[str]:
        """What stands between this configuration and a working channel, found without writing anything."""
        problems = []
        if not self.config.url.startswith(("https://", "http://")):
            problems.append(f"HELPDESK_URL={self.config.url!r} is not https://<subdomain>.zendesk.com")
        if not self.config.token:
            problems.append("HELPDESK_TOKEN is not set (a Zendesk API token)")
        if not self.config.user:
            problems.append("HELPDESK_USER is not set (the email address of the agent the API token belongs to)")
        if problems:
            return problems
        me, problem = self.get_json(f"{API}/users/me.json", what="reading the API user (users/me)",
                                    thing="API user")
        if problem:
            return [problem]
        user = me.get("user") if isinstance(me, dict) else None
        if not isinstance(user, dict) or user.get("id") is None:
            return ["Zendesk answered as an anonymous user: HELPDESK_USER / HELPDESK_TOKEN were not accepted"]
        if user.get("role") not in ("agent", "admin"):
            problems.append(f"the API user {user.get('email')} has the role {user.get('role')!r}: "
                            f"updating tickets needs an agent or an admin")
        if str(user.get("email", "")).lower() != self.config.user.lower():
            problems.append(f"Zendesk authenticated {user.get('email')}, not HELPDESK_USER={self.config.user}")
        if self.escalation_group_id:
            _, problem = self.get_json(f"{API}/groups/{self.escalation_group_id}.json",
                                       what=f"reading group {self.escalation_group_id}",
                                       thing=f"group {self.escalation_group_id} (ZENDESK_ESCALATION_GROUP_ID)")
            if problem:
                problems.append(problem)
        return problems

    def get_json(self, path: str, *, what: str, thing: str):
        """(the JSON answer, "") of a read, or (None, the problem in words)."""
        try:
            answer = send(self.client, "GET", path, max_wait=self.config.max_wait, sleep=self.sleep)
        except (NotSent, NoAnswer) as exc:
            return None, str(exc)
        if answer.status == 200:
            return answer.json(None), ""
        if 300 <= answer.status < 400:
            return None, (f"Zendesk redirected {what} (HTTP {answer.status}) to {answer.header('location')}: "
                          f"set HELPDESK_URL to https://<subdomain>.zendesk.com")
        if 400 <= answer.status < 500:
            return None, refusal(answer, what=what, thing=thing, max_wait=self.config.max_wait)
        return None, f"Zendesk answered HTTP {answer.status} to {what}: {error_text(answer)}"
