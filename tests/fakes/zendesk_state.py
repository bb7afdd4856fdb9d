"""The data behind the fake Zendesk: users, groups, tickets with their audits, views, search; Zendesk's shapes.

The shapes follow Zendesk's Support API documentation, cited where used:

* Tickets (show, update; statuses, priorities; an update adds a comment and
  may carry `metadata`): https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/
* Setting metadata: "When you create or update a ticket, an audit gets
  generated if the ticket properties have changed. On each such audit, you
  can add up to 1 kilobyte of custom metadata ... If your update does not
  change the ticket, this will not create an audit and will not save your
  metadata." The request sends `ticket.metadata`; the audit shows it as
  `metadata.custom` beside Zendesk's `metadata.system`:
  https://developer.zendesk.com/documentation/ticketing/managing-tickets/creating-and-updating-tickets/
* Ticket audits (id, ticket_id, created_at, author_id, metadata, via,
  events; Comment events with body/public, Change events with field_name,
  value, previous_value): https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/
* A closed ticket cannot be reopened or updated; "A ticket must have an
  assignee in order to be solved" (solving an unassigned ticket assigns the
  solving agent, as Zendesk's "auto-assign tickets upon solve" does).
* Search results carry `result_type`; `include=tickets(users)` side-loads
  users: https://developer.zendesk.com/api-reference/ticketing/ticket-management/search/,
  https://developer.zendesk.com/documentation/ticketing/using-the-zendesk-api/side_loading/
* Errors: `{"error": "RecordNotFound", "description": "Not found"}`,
  `{"error": "RecordInvalid", "description": "Record validation errors",
  "details": {field: [{"description": ...}]}}`. The exact texts of the
  descriptions are the fake's own; the statuses and the envelope are Zendesk's.

All methods take the state's lock: the HTTP server is threaded.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import shlex
import threading

UPDATE_STATUSES = ("open", "pending", "hold", "solved", "closed")  # "new" cannot be set on update
PRIORITIES = ("urgent", "high", "normal", "low")
UPDATABLE = {"status", "priority", "group_id", "assignee_id", "subject", "type", "tags", "comment", "metadata",
             "custom_fields", "due_at", "external_id", "requester_id"}


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def invalid(field: str, description: str) -> tuple[int, dict]:
    return 422, {"error": "RecordInvalid", "description": "Record validation errors",
                 "details": {field: [{"description": description, "error": "InvalidValue"}]}}


NOT_FOUND = (404, {"error": "RecordNotFound", "description": "Not found"})


class ZendeskState:
    """One Zendesk account's data, as the fake server serves it."""

    def __init__(self):
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.ids = itertools.count(1001)
            self.users: dict[int, dict] = {}
            self.groups: dict[int, dict] = {}
            self.tickets: dict[int, dict] = {}
            self.audits: dict[int, list[dict]] = {}
            self.views: dict[int, dict] = {}
            self.forbidden: set[int] = set()  # tickets the agent may not see or change (403)
            self.agent = self.add_user("Ada Agent", "agent@example.com", role="admin")

    # ------------------------------------------------------------------ seeding

    def add_user(self, name: str, email: str | None, *, role: str = "end-user", locale: str = "en-US") -> dict:
        with self.lock:
            for user in self.users.values():
                if email and user["email"] == email:
                    return user
            uid = next(self.ids)
            user = {"id": uid, "url": f"/api/v2/users/{uid}.json", "name": name, "email": email, "role": role,
                    "locale": locale, "active": True, "created_at": now()}
            self.users[uid] = user
            return user

    def add_group(self, name: str) -> dict:
        with self.lock:
            gid = next(self.ids)
            self.groups[gid] = {"id": gid, "name": name, "created_at": now()}
            return self.groups[gid]

    def add_ticket(self, subject: str = "Refund for order 1234", description: str = "Where is my refund?", *,
                   requester_email: str | None = "ann@example.com", requester_name: str = "Ann Example",
                   status: str = "open", priority: str | None = "normal", assigned: bool = True,
                   group_id: int | None = None, tags: tuple = (), locale: str = "en-US") -> dict:
        """A ticket as a customer's email creates it: the description is its first (public) comment."""
        with self.lock:
            requester = self.add_user(requester_name, requester_email, locale=locale)
            tid = next(self.ids)
            ticket = {"id": tid, "url": f"/api/v2/tickets/{tid}.json", "subject": subject, "raw_subject": subject,
                      "description": description, "status": status, "priority": priority, "type": None,
                      "requester_id": requester["id"], "submitter_id": requester["id"],
                      "assignee_id": self.agent["id"] if assigned else None, "group_id": group_id,
                      "tags": list(tags), "via": {"channel": "email"}, "created_at": now(), "updated_at": now()}
            self.tickets[tid] = ticket
            self.audits[tid] = []
            events = [{"type": "Comment", "body": description, "public": True, "author_id": requester["id"]},
                      *({"type": "Create", "field_name": name, "value": ticket[name]}
                        for name in ("subject", "status", "priority", "requester_id"))]
            self._audit(tid, requester["id"], events, custom={}, client="email", channel="email")
            return ticket

    def add_audits(self, ticket_id: int, count: int) -> None:
        """`count` earlier audits by someone else (e.g. a trigger): look-up must page past them."""
        with self.lock:
            for n in range(count):
                self._audit(ticket_id, self.agent["id"], [{"type": "Change", "field_name": "tags",
                                                           "value": [f"t{n}"], "previous_value": []}],
                            custom={"other_integration": str(n)}, client="trigger", channel="rule")

    def add_view(self, title: str, ticket_ids: list[int]) -> dict:
        with self.lock:
            vid = next(self.ids)
            self.views[vid] = {"id": vid, "title": title, "ticket_ids": list(ticket_ids)}
            return self.views[vid]

    # ------------------------------------------------------------------ reads

    def ticket(self, ticket_id: int) -> dict | None:
        with self.lock:
            ticket = self.tickets.get(ticket_id)
            return json.loads(json.dumps(ticket)) if ticket else None

    def audit_list(self, ticket_id: int) -> list[dict]:
        with self.lock:
            return json.loads(json.dumps(self.audits.get(ticket_id, [])))

    def comments(self, ticket_id: int, *, public: bool | None = None, by_agent: bool = False) -> list[dict]:
        """The Comment events of a ticket's audits, oldest first."""
        out = []
        for audit in self.audit_list(ticket_id):
            for event in audit["events"]:
                if event["type"] != "Comment" or (public is not None and event["public"] != public):
                    continue
                if by_agent and event["author_id"] != self.agent["id"]:
                    continue
                out.append(event)
        return out

    def agent_replies(self, ticket_id: int) -> list[dict]:
        """Public comments the API agent wrote: what the customer received."""
        return self.comments(ticket_id, public=True, by_agent=True)

    def users_by_ids(self, ids) -> list[dict]:
        with self.lock:
            return [dict(self.users[i]) for i in ids if i in self.users]

    # ------------------------------------------------------------------ the update

    def update_ticket(self, ticket_id: int, body, *, author_id: int, client: str) -> tuple[int, dict]:
        """PUT /api/v2/tickets/{id}: validate, apply, create the audit; (status, JSON body)."""
        with self.lock:
            ticket = self.tickets.get(ticket_id)
            if ticket is None:
                return NOT_FOUND
            if ticket_id in self.forbidden:
                return 403, {"error": "Forbidden", "description": "You do not have access to this page."}
            fields = body.get("ticket") if isinstance(body, dict) else None
            if not isinstance(fields, dict):
                return 400, {"error": "InvalidParameter", "description": "ticket parameter is missing"}
            problem = self._invalid_update(ticket, fields)
            if problem:
                return problem
            events = self._apply(ticket, fields, author_id)
            if not events:
                return 200, {"ticket": dict(ticket)}  # nothing changed: no audit, metadata not kept
            ticket["updated_at"] = now()
            metadata = fields.get("metadata")
            audit = self._audit(ticket_id, author_id, events, custom=metadata if isinstance(metadata, dict) else {},
                                client=client, channel="api")
            return 200, {"ticket": dict(ticket), "audit": json.loads(json.dumps(audit))}

    def _invalid_update(self, ticket: dict, fields: dict) -> tuple[int, dict] | None:
        if ticket["status"] == "closed":
            return invalid("status", "Status: closed prevents ticket update")
        unknown = sorted(set(fields) - UPDATABLE)
        if unknown:
            return 400, {"error": "InvalidParameter", "description": f"unknown ticket properties: {unknown}"}
        if "status" in fields and fields["status"] not in UPDATE_STATUSES:
            return invalid("status", f"Status: {fields['status']!r} is not a valid status")
        if "priority" in fields and fields["priority"] not in PRIORITIES:
            return invalid("priority", f"Priority: {fields['priority']!r} is not a valid priority")
        if "group_id" in fields and fields["group_id"] not in self.groups:
            return invalid("group_id", f"Group: {fields['group_id']!r} is not a group of this account")
        comment = fields.get("comment")
        if comment is not None:
            if not isinstance(comment, dict) or not str(comment.get("body") or comment.get("html_body") or ""):
                return invalid("comment", "Comment: body cannot be blank")
            if not isinstance(comment.get("public", True), bool):
                return invalid("comment", "Comment: public must be true or false")
        metadata = fields.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            return invalid("metadata", "Metadata: must be an object")
        return None

    def _apply(self, ticket: dict, fields: dict, author_id: int) -> list[dict]:
        events: list[dict] = []
        comment = fields.get("comment")
        if comment:
            events.append({"type": "Comment", "body": comment.get("body") or comment.get("html_body"),
                           "public": comment.get("public", True), "author_id": author_id, "attachments": []})
        changes = {k: v for k, v in fields.items() if k not in ("comment", "metadata")}
        if changes.get("status") == "solved" and not (changes.get("assignee_id") or ticket["assignee_id"]):
            changes["assignee_id"] = author_id  # a solved ticket has an assignee: the solving agent
        for name, value in changes.items():
            if ticket.get(name) != value:
                events.append({"type": "Change", "field_name": name, "value": value,
                               "previous_value": ticket.get(name)})
                ticket[name] = value
        return events

    def _audit(self, ticket_id: int, author_id: int, events: list[dict], *, custom: dict, client: str,
               channel: str) -> dict:
        audit_id = next(self.ids)
        for event in events:
            event["id"] = next(self.ids)
            if event["type"] == "Comment":
                event["audit_id"] = audit_id
        audit = {"id": audit_id, "ticket_id": ticket_id, "created_at": now(), "author_id": author_id,
                 "metadata": {"system": {"client": client, "ip_address": "127.0.0.1", "location": "Localhost",
                                         "latitude": 0, "longitude": 0},
                              "custom": dict(custom)},
                 "via": {"channel": channel, "source": {"from": {}, "to": {}, "rel": None}},
                 "events": events}
        self.audits[ticket_id].append(audit)
        return audit

    # ------------------------------------------------------------------ lists

    def view_ticket_list(self, view_id: int) -> list[dict] | None:
        with self.lock:
            view = self.views.get(view_id)
            if view is None:
                return None
            return [dict(self.tickets[t]) for t in view["ticket_ids"] if t in self.tickets]

    def search(self, query: str) -> tuple[int, dict | list[dict]]:
        """The tickets matching a query: `type:ticket`, `status:X`, `status<X`, `priority:X`, `tags:X`, words."""
        try:
            terms = shlex.split(query)
        except ValueError as exc:
            return 400, {"error": "invalid", "description": f"Invalid search: {exc}"}
        if not terms:
            return 400, {"error": "invalid", "description": "Invalid search: the query is empty"}
        order = {name: n for n, name in enumerate(("new", "open", "pending", "hold", "solved", "closed"))}
        with self.lock:
            found = []
            for ticket in self.tickets.values():
                if all(self._matches(ticket, term, order) for term in terms):
                    found.append({**ticket, "result_type": "ticket"})
            return 200, sorted(found, key=lambda t: t["id"])

    @staticmethod
    def _matches(ticket: dict, term: str, order: dict) -> bool:
        if term == "type:ticket":
            return True
        if term.startswith("status<"):
            return order.get(ticket["status"], 99) < order.get(term[7:], -1)
        for prefix, field in (("status:", "status"), ("priority:", "priority")):
            if term.startswith(prefix):
                return ticket[field] == term[len(prefix):]
        if term.startswith(("tags:", "tag:")):
            return term.split(":", 1)[1] in ticket["tags"]
        return term.lower() in f"{ticket['subject']} {ticket['description']}".lower()
