"""Finding a Request Tracker action again by its key: the reply or comment carrying it, and a ticket change after it.

A reply or a comment carries the key itself (the custom field and the
marker). A ticket change (status, queue, owner, priority) cannot: its key
comment is written first and announces the change (`change_marker`), and the
change is sent only once RT has answered that comment. So:

* no comment carries the key -> no attempt ever sent the change: "not found";
* a key comment announces a change -> the ticket's history after it says
  whether the change landed: each field it names held the wanted value at
  some moment after the comment (it already had it, or a change set it):
  "found"; none did: "not found"; some did: "cannot tell" (a person decides).

Every "not found" rests on answers read in full; anything less raises
`Unanswered` ("cannot tell").
"""

import json
import re
from dataclasses import dataclass
from urllib.parse import quote

from ledger.channels.base import LookupResult
from ticketagent.channels.rt_rest import SYSTEM, Reader, Unanswered, rt_message

CHANGE_MARKER = "ticketagent-change"
CHANGE_PATTERN = re.compile(r"<!--\s*" + CHANGE_MARKER + r":\s*(\{.*?\})\s*-->", re.DOTALL)
REPLY_TYPES = ("Correspond", "Comment")
LOOKUP_MAX_TRANSACTIONS = 500  # replies and comments read per look-up before it gives up ("cannot tell")


def change_marker(want: dict) -> str:
    """The wanted values of a change, in its key comment (JSON in an HTML comment; a "-" is written
    as its JSON escape, so no value can end the comment early)."""
    text = json.dumps({field: str(value) for field, value in want.items()}, ensure_ascii=True, sort_keys=True)
    return f"\n<!-- {CHANGE_MARKER}:\n{text.replace('-', chr(92) + 'u002d')}\n-->\n"


def announced_change(content: str) -> dict | None:
    """The change a key comment announces, or None (a reply, a draft, or a key comment written after
    its change by an earlier version)."""
    match = CHANGE_PATTERN.search(content or "")
    if not match:
        return None
    try:
        want = json.loads(match.group(1))
    except ValueError:
        return None
    return want if isinstance(want, dict) and want else None


def sql_literal(key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._:-]+", key):
        raise Unanswered(f"the key {key[:20]!r} cannot be searched for in TicketSQL")
    return f"'{key}'"


@dataclass(frozen=True)
class Keyed:
    """A reply or comment on the ticket that carries the key."""

    txn: int
    type: str
    want: dict | None  # the change it announces, if it is a change's key comment


def rt_lookup(reader: Reader, custom_field: str, ticket: str, key: str) -> LookupResult:
    """Did the action with `key` on `ticket` land? (see the module docstring)"""
    keyed, how = _keyed_by_search(reader, custom_field, ticket, key)
    if not keyed:
        seen = reader.get(f"/ticket/{ticket}")
        if seen.status == 404:
            return LookupResult(False, detail=f"ticket {ticket} does not exist in {SYSTEM}: nothing was written")
        if seen.status != 200:
            raise Unanswered(f"GET /ticket/{ticket} answered {seen.status}: {rt_message(seen)}")
        keyed, read = _keyed_in_history(reader, ticket, key)
        how = f"in ticket {ticket}'s history"
        if not keyed:
            return LookupResult(False, detail=f"not on ticket {ticket}: no {custom_field} custom field, no content "
                                              f"match, and none of its {read} replies and comments carries the key")
    changes = [k for k in keyed if k.want is not None]
    if not changes:
        first = keyed[0]
        return LookupResult(True, external_ref=str(first.txn), detail=f"found {how}: transaction {first.txn}")
    return _change_after(reader, ticket, changes, how)


def _keyed_by_search(reader: Reader, custom_field: str, ticket: str, key: str) -> tuple[list[Keyed], str]:
    """The key's replies and comments found by the custom field, else by content; a reply by the custom
    field alone. For a change's key comment, every key comment either search finds (the earliest counts)."""
    literal = sql_literal(key)
    hits = reader.search(f"CF.{{{custom_field}}} = {literal}")
    how = f"by custom field {custom_field}"
    if hits and all(h.get("Type") == "Correspond" for h in hits):
        return [Keyed(int(h["id"]), "Correspond", None) for h in hits], how
    types = " OR ".join(f"Type = '{t}'" for t in REPLY_TYPES)
    by_content = reader.search(f"TicketId = {ticket} AND ({types}) AND Content LIKE {literal}")
    if not hits:
        hits, how = by_content, f"by content on ticket {ticket}"
    ids = sorted({int(h["id"]) for h in [*hits, *by_content]})
    types_of = {int(h["id"]): str(h.get("Type") or "") for h in [*hits, *by_content]}
    return [Keyed(txn, types_of[txn], _announced(reader, txn, types_of[txn])) for txn in ids], how


def _keyed_in_history(reader: Reader, ticket: str, key: str) -> tuple[list[Keyed], int]:
    """Every reply and comment of the ticket read: (those carrying the key, oldest first; how many were read)."""
    history = reader.items(f"/ticket/{ticket}/history", fields="Type", orderby="id", order="ASC")
    replies = [(int(t["id"]), str(t.get("Type"))) for t in history if t.get("Type") in REPLY_TYPES]
    if len(replies) > LOOKUP_MAX_TRANSACTIONS:
        raise Unanswered(f"ticket {ticket} has {len(replies)} replies and comments, more than "
                         f"{LOOKUP_MAX_TRANSACTIONS} to read")
    keyed = []
    for txn, kind in replies:
        content = _content(reader, txn)
        if key in content:
            keyed.append(Keyed(txn, kind, announced_change(content) if kind == "Comment" else None))
    return keyed, len(replies)


def _announced(reader: Reader, txn: int, kind: str) -> dict | None:
    """The change a comment announces (a reply announces none)."""
    return announced_change(_content(reader, txn)) if kind == "Comment" else None


def _content(reader: Reader, txn: int) -> str:
    return "\n".join(str(part.get("Content") or "")
                     for part in reader.items(f"/transaction/{txn}/attachments", fields="Content"))


# -- a change after its key comment ----------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A wanted value as RT writes it: in the history (ids for a queue or an owner) and on the ticket."""

    field: str
    shown: str  # as the key comment names it
    in_history: frozenset  # OldValue/NewValue strings that mean it (lower case)
    on_ticket: frozenset  # the ticket's own value (a queue's or owner's Name or id) that means it

    def now(self, ticket: dict) -> bool:
        have = ticket.get(self.field)
        values = [have.get("Name"), have.get("id")] if isinstance(have, dict) else [have]
        return any(str(v if v is not None else "").lower() in self.on_ticket for v in values)


def _target(reader: Reader, field: str, value: str) -> Target:
    """The wanted value, with the id RT writes in the history for a queue or an owner."""
    plain = frozenset({value.lower()})
    if field not in ("Queue", "Owner"):
        return Target(field, value, plain, plain)
    kind = "queue" if field == "Queue" else "user"
    answer = reader.get(f"/{kind}/{quote(value, safe='')}")
    data = answer.json(None)
    if answer.status != 200 or not isinstance(data, dict):
        raise Unanswered(f"the {kind} {value!r} the change names could not be read: GET /{kind}/… answered "
                         f"{answer.status}: {rt_message(answer)}")
    ids = {data.get("id")} | {h.get("id") for h in data.get("_hyperlinks") or [] if h.get("ref") == "self"}
    ids = {str(i).lower() for i in ids if i not in (None, "")}
    return Target(field, value, frozenset(ids), frozenset(ids | {str(data.get("Name") or value).lower()}))


def _change_after(reader: Reader, ticket: str, keyed: list[Keyed], how: str) -> LookupResult:
    """Whether the change each key comment announces landed after it (one found is enough); `how`: how the
    key comments were found."""
    history = reader.items(f"/ticket/{ticket}/history", fields="Type,Field,OldValue,NewValue", orderby="id",
                           order="ASC")
    now = reader.json(f"/ticket/{ticket}", **{"fields[Queue]": "Name", "fields[Owner]": "Name"})
    verdicts = [_landed(reader, history, now, ticket, k, how) for k in keyed]
    for wanted in (True, None):
        for found, detail, ref in verdicts:
            if found is wanted:
                return LookupResult(found, external_ref=ref if found else "", detail=detail)
    return LookupResult(False, detail=verdicts[0][1])


def _landed(reader: Reader, history: list[dict], now: dict, ticket: str, keyed: Keyed, how: str) -> tuple:
    """(found, detail, reference) for one key comment: True when every field it names held its wanted
    value at some moment after it, False when none was set after it and some never held, None when some
    were set and others never held. A field that already held its value is no trace of the change: RT
    writes no transaction for it, so it cannot tell a change that ran from one that never came."""
    landed, missing, set_after = [], [], False
    for field, value in keyed.want.items():
        target = _target(reader, field, str(value))
        after = [h for h in history if int(h.get("id") or 0) > keyed.txn and h.get("Field") == field]
        before = str(after[0].get("OldValue") or "").lower() in target.in_history if after else target.now(now)
        setting = [h for h in after if str(h.get("NewValue") or "").lower() in target.in_history]
        if setting:
            landed.append(f"{field} {value} (transaction {setting[0].get('id')})")
            set_after = True
        elif before:
            landed.append(f"{field} {value} (already so)")
        else:
            missing.append(f"{field} {value}")
    comment = f"its key comment (transaction {keyed.txn})"
    if not missing:
        return True, f"found {how}: {comment} on ticket {ticket}, and after its key comment {', '.join(landed)}", \
            str(keyed.txn)
    if not set_after:
        already = f"; {', '.join(landed)}" if landed else ""
        return False, (f"not on ticket {ticket}: {comment} is there, but nothing of the change it announces "
                       f"landed after it ({', '.join(missing)} never held since{already})"), ""
    return None, (f"{SYSTEM} look-up could not tell: part of the change announced by {comment} on ticket "
                  f"{ticket} landed after it: landed: {', '.join(landed)}; not landed: {', '.join(missing)}; "
                  "a person decides"), ""
