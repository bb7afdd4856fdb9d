"""The facts a playbook declares, as values a condition compares: read from the ticket, or extracted from its text.

A fact's `source` says where it comes from: `metadata.<key>` (the order data
a shop attaches, an upload's metadata column), `ticket.<field>`,
`triage.<field>`, or `extract` -- the model fills it during triage, as the
type the playbook declares (money with its currency, a number, a date,
yes/no, one of a list, text). A value that is missing or cannot be read as
its type is None ("not known"): a comparison on it is false, `is missing`
true. The ticket's text never fills a fact read from the order data.

`facts_extract` is how the offline model fills the extracted facts: by
pattern, from the fact's cues; what it cannot find it leaves None and
names (`unknown`).
"""

import re
from decimal import Decimal

from ticketagent.playbooks.conditions import Money, date_of, number_of
from ticketagent.playbooks.words import phrase_pattern, plain

_YES = frozenset({"yes", "true", "1", "ja", "oui", "si", "sí", "y"})
_NO = frozenset({"no", "false", "0", "nein", "non", "n"})
_CURRENCY = {"€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR", "$": "USD", "usd": "USD", "us$": "USD",
             "£": "GBP", "gbp": "GBP"}
_SIGN = r"(?P<sign>€|\$|£|eur|usd|gbp|euros?)"
_AMOUNT = r"(?P<amount>\d{1,3}(?:[.,' ]\d{3})+(?:[.,]\d{2})?|\d+(?:[.,]\d{1,2})?)"
_MONEY_TEXT = (re.compile(rf"(?<![\w$€£]){_SIGN}\s?{_AMOUNT}(?!\d)", re.IGNORECASE),
               re.compile(rf"(?<![\w.,]){_AMOUNT}\s?{_SIGN}(?!\w)", re.IGNORECASE))
_ISO_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")


def fact_value(fact, *, ticket: dict, triage: dict | None):
    """The value of declared fact `fact` for this ticket (typed; None when not known)."""
    kind, _, name = fact.source.partition(".")
    if kind == "extract":
        raw = ((triage or {}).get("facts") or {}).get(fact.name)
    elif kind == "metadata":
        raw = (ticket.get("metadata") or {}).get(name)
    elif kind == "ticket":
        raw = ticket.get(name)
    else:
        raw = (triage or {}).get(name)
    if raw is None or raw == "":
        raw = fact.default
    return typed(fact, raw, ticket=ticket)


def typed(fact, raw, *, ticket: dict):
    if raw is None or raw == "":
        return None
    if fact.type == "number":
        return number_of(raw)
    if fact.type == "money":
        return _money(fact, raw, ticket=ticket)
    if fact.type == "date":
        found = date_of(raw)
        return found.isoformat() if found else None
    if fact.type == "yes_no":
        if isinstance(raw, bool):
            return raw
        word = plain(str(raw))
        return True if word in _YES else False if word in _NO else None
    if fact.type == "one_of":
        word = plain(str(raw))
        return next((option for option in fact.options if plain(option) == word), None)
    return str(raw)


def _money(fact, raw, *, ticket: dict) -> "Money | None":
    if isinstance(raw, dict):
        amount, currency = number_of(raw.get("amount")), str(raw.get("currency") or "")
    else:
        amount, currency = number_of(raw), ""
    if fact.currency.startswith("metadata."):
        currency = str((ticket.get("metadata") or {}).get(fact.currency.removeprefix("metadata.")) or currency)
    elif fact.currency:
        currency = fact.currency
    return Money(amount, currency.upper()) if amount is not None else None


def facts_extract(spec, ticket: dict) -> tuple[dict, list[str]]:
    """The extracted facts (`source: extract`) found by pattern in the ticket's text, and the names of
    those it could not find (None in the first)."""
    text = f"{ticket.get('subject', '')}\n{ticket.get('body', '')}"
    values, unknown = {}, []
    for fact in spec.facts:
        if fact.source != "extract":
            continue
        value = _extract(fact, text)
        values[fact.name] = value
        if value is None:
            unknown.append(fact.name)
    return values, unknown


def _cues(fact) -> list[str]:
    return [phrase for phrases in fact.cues.values() for phrase in phrases]


def _extract(fact, text: str):
    folded = plain(text)
    if fact.type == "yes_no":
        return True if any(phrase_pattern(p).search(folded) for p in _cues(fact)) else None
    if fact.type == "number":
        for phrase in _cues(fact):
            match = phrase_pattern(phrase).search(folded)
            if match and match.groups():
                return float(match.group(1))
        return None
    if fact.type == "money":
        return _money_in(text)
    if fact.type == "date":
        found = _ISO_DATE.search(text)
        return found.group(1) if found else None
    if fact.type == "one_of":
        return next((o for o in fact.options if phrase_pattern(o).search(folded)), None)
    return next((p for p in _cues(fact) if phrase_pattern(p).search(folded)), None)


def _money_in(text: str) -> dict | None:
    """The first amount of money written in `text`, with its currency."""
    found = [m for m in (pattern.search(text) for pattern in _MONEY_TEXT) if m]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    amount = _amount(match["amount"])
    sign = match["sign"].casefold()
    return {"amount": float(amount), "currency": _CURRENCY.get(sign, sign.upper())} if amount is not None else None


def _amount(text: str) -> Decimal | None:
    """"2,349.00", "3.500", "3 149,50", "189" as a number: a last separator before exactly two digits is
    the decimal point, any other separates thousands."""
    text = text.strip()
    match = re.search(r"[.,](\d{2})$", text)
    whole, cents = (text[: match.start()], match.group(1)) if match else (text, "")
    digits = re.sub(r"[.,' ]", "", whole)
    return number_of(f"{digits}.{cents}" if cents else digits)
