"""Contact details and personal data in a reply: what a reply may give, and what it must not copy back.

A phone number is compared by its digits, a link without its scheme and
`www.`, an email address in lower case. The ticket is never a source of
contact details a reply may give ("a number I found online"): only the
playbook's allow-list and its own text are. What the customer wrote about
themselves -- their phone, street address, personal email -- is theirs, and
a reply does not copy it back.
"""

import json
import re

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"')\]]+", re.I)
_PHONE = re.compile(r"(?<![\w/])\+?\d[\d ().-]{5,}\d(?![\w/])")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{1,2}[./-]\d{1,2}[./-]\d{2,4}$")
# A street address as customers write one: a number beside a street word, or a postal code and a town.
_STREET_WORDS = ("(?i:street|st|road|rd|avenue|ave|lane|ln|drive|dr|way|view|court|ct|place|pl|boulevard|blvd|terrace|"
                 "square|sq|close|crescent|row|hill|park|apt|suite|unit|flat|rue|chemin|allée|impasse|quai|calle|"
                 "avenida|plaza|paseo|carrer|camino|straat|laan|plein|gracht|kade|singel|via|viale|piazza|rua)")
_ADDRESS = re.compile(
    r"\b\d{1,5}[a-z]?,?\s+(?:[A-Z\u00c0-\u017f][\w'\u00c0-\u017f-]*\s+){0,3}(?:" + _STREET_WORDS + r")\b\.?"
    r"|\b(?:" + _STREET_WORDS + r")\s+(?:de\s+(?:la\s+)?|del\s+|di\s+)?[A-Z\u00c0-\u017f][\w'\u00c0-\u017f-]*"
    r"(?:\s+[A-Z\u00c0-\u017f][\w'\u00c0-\u017f-]*){0,2},?\s+\d{1,5}\b"
    r"|\b[A-Z\u00c0-\u017f][\w\u00c0-\u017f-]*(?i:stra(?:ß|ss)e|str\.|weg|gasse|platz|allee|ring|damm|ufer|"
    r"straat|laan|plein|gracht|kade)\s+\d{1,4}[a-z]?\b"
    r"|\b\d{4,5}\s+[A-Z\u00c0-\u017f][a-z\u00e0-\u017f]{2,}\b"
    r"|\b[A-Z]{2}\s+\d{5}(?:-\d{4})?\b")


def contacts_found(text: str) -> dict[str, set[str]]:
    """The phone numbers (digits), URLs (lower case, no scheme) and email addresses in `text`."""
    phones = set()
    for match in _PHONE.finditer(text):
        raw = match.group(0).strip(" .-")
        digits = re.sub(r"\D", "", raw)
        if 7 <= len(digits) <= 15 and not _DATE.match(raw):
            phones.add(digits)
    urls = {re.sub(r"^(https?://)?(www\.)?", "", u.lower()).rstrip(".,;:!?/") for u in _URL.findall(text)}
    emails = {e.lower().rstrip(".") for e in _EMAIL.findall(text)}
    return {"phone": phones, "url": urls, "email": emails}


def _same_phone(a: str, b: str) -> bool:
    """Two numbers by their digits, with or without a country code or trunk prefix ("0170…", "+49 170…")."""
    a, b = a.lstrip("0"), b.lstrip("0")
    return a.endswith(b) or b.endswith(a) if min(len(a), len(b)) >= 7 else a == b


def _listed(found: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """The contacts of `found` that `allowed` does not hold, as "phone 4930…", "URL …", "email …"."""
    out = [f"phone {p}" for p in sorted(found["phone"]) if not any(_same_phone(p, k) for k in allowed["phone"])]
    out += [f"URL {u}" for u in sorted(found["url"])
            if not any(u == k or u.startswith(k + "/") for k in allowed["url"])]
    out += [f"email {e}" for e in sorted(found["email"] - allowed["email"])]
    return out


def contacts_unknown(text: str, *, known: str) -> list[str]:
    """The contact details in `text` that `known` does not contain (a phone matches by its digits)."""
    return _listed(contacts_found(text), contacts_found(known))


def personal_data_echoed(text: str, *, ticket: dict, allowed: str = "") -> list[str]:
    """What the customer wrote about themselves (phone, street address, email -- their sender address too)
    that `text` copies back; a contact in `allowed` (the playbook's own) is not theirs."""
    written = "\n".join([ticket.get("subject", ""), ticket.get("body", ""), json.dumps(ticket.get("metadata") or {},
                                                                                     ensure_ascii=False)])
    theirs = contacts_found(written + "\n" + ticket.get("customer_email", ""))
    ours = contacts_found(allowed)
    found = contacts_found(text)
    echoed = [f"phone {p}" for p in sorted(found["phone"]) if any(_same_phone(p, t) for t in theirs["phone"])
              and not any(_same_phone(p, o) for o in ours["phone"])]
    echoed += [f"email {e}" for e in sorted(found["email"] & theirs["email"] - ours["email"])]
    flat = _flat(text)
    for match in _ADDRESS.finditer(ticket.get("body", "")):
        address = _flat(match.group(0)).rstrip(".,")
        if address in flat and f"address {address}" not in echoed:
            echoed.append(f"address {address}")
    return echoed


def _flat(text: str) -> str:
    return " ".join(text.replace(",", " ").split()).casefold()
