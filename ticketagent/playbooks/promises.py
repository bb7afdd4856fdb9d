"""Promises in a reply: phrases that commit to a refund, credit, replacement, compensation or a date, and money.

The phrases are the playbook's (`checks.promise_phrases`, a list per
language; every list is read against every reply): matched in any case, on
word boundaries, with `*` for up to three words between and `{date}` for a
day (a weekday, tomorrow, a date in numbers or with a month's name). Any
amount of money written with a currency symbol or code is a promise too,
unless the lead turned `checks.money` off. A sentence the playbook's own
articles say word for word is the playbook speaking, not the model: it is
not read.
"""

import functools
import re

_WEEKDAYS = ("monday|tuesday|wednesday|thursday|friday|saturday|sunday|montag|dienstag|mittwoch|donnerstag|freitag|"
             "samstag|sonntag|lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche|lunes|martes|miércoles|jueves|"
             "viernes|sábado|domingo|maandag|dinsdag|woensdag|donderdag|vrijdag|zaterdag|zondag|lunedì|martedì|"
             "mercoledì|giovedì|venerdì|sabato|segunda-feira|terça-feira|quarta-feira|quinta-feira|sexta-feira")
_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|"
           "apr|jun|jul|aug|sep|sept|oct|nov|dec|januar|februar|märz|juni|juli|oktober|dezember|janvier|février|"
           "mars|avril|mai|juin|juillet|août|septembre|octobre|novembre|décembre|enero|febrero|marzo|abril|mayo|"
           "junio|julio|agosto|septiembre|octubre|noviembre|diciembre|januari|februari|maart|mei|augustus")
_RELATIVE = ("tomorrow|today|tonight|morgen|heute|demain|aujourd'hui|mañana|hoy|vandaag|domani|amanhã|"
             r"(?:the\s+)?end\s+of\s+(?:the\s+)?(?:day|week|month)|ende\s+der\s+woche|fin\s+de\s+(?:la\s+)?semaine|"
             r"fin\s+de\s+semana|eind\s+van\s+de\s+week|next\s+week|nächste\s+woche|la\s+semaine\s+prochaine|"
             r"la\s+semana\s+que\s+viene|volgende\s+week")
DATE = (rf"(?:(?:{_WEEKDAYS}|{_RELATIVE})\b|\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}[./]\d{{1,2}}(?:[./]\d{{2,4}})?"
        rf"|\d{{1,2}}(?:st|nd|rd|th|\.)?\s+(?:of\s+|de\s+)?(?:{_MONTHS})\b|(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b)")
_CODES = "USD|EUR|GBP|CHF|JPY|CNY|RMB|AUD|CAD|NZD|SEK|NOK|DKK|PLN|CZK|HUF|INR|BRL|MXN|HKD|SGD"
_NUMBER = r"\d(?:[\d,.'\u00a0\u202f]|\s(?=\d{3}\b))*"
MONEY = re.compile(
    rf"(?:[$€£¥₹₩]|\b(?:{_CODES})\b|\b(?:US|A|C|NZ|HK)\$)\s?{_NUMBER}(?:\s?(?:[km]\b|million|thousand))?"
    rf"|{_NUMBER}\s?(?:[$€£¥₹₩]|\b(?:{_CODES})\b|(?i:euros?|dollars?|pounds?|francs?|yuan|yen)\b|元|円|块)")
_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_QUOTATION = re.compile(r"\"[^\"\n]+\"|“[^”\n]+”|„[^“”\n]+[“”]|«[^»\n]+»|「[^」\n]+」")


@functools.lru_cache(maxsize=1024)  # a playbook's phrases are few and every reply of every item checks them all
def phrase_pattern(phrase: str) -> re.Pattern:
    """A phrase of the playbook as a pattern: words on word boundaries, `*` up to three words, `{date}` a day."""
    parts = []
    for word in phrase.split():
        if word == "*":
            parts.append(r"(?:\S+\s+){0,3}?")
        else:
            pieces = [DATE if piece == "{date}" else re.escape(piece) for piece in re.split(r"(\{date\})", word)]
            parts.append("".join(pieces) + r"\s+")
    body = "".join(parts).removesuffix(r"\s+")
    return re.compile(rf"(?<!\w){body}(?!\w)", re.I)


def _flat(text: str) -> str:
    return " ".join(text.split()).casefold()


def sentences_unquoted(text: str, *, articles: list[str]) -> list[str]:
    """The sentences of `text` that none of `articles` says word for word (short ones always count)."""
    said = "\n".join(_flat(a) for a in articles)
    return [s for s in (m.group(0).strip() for m in _SENTENCE.finditer(text))
            if s and not (len(s) >= 20 and _flat(s) in said)]


def _around(sentence: str, match: re.Match, width: int = 140) -> str:
    """The sentence a match is in, cut to about `width` characters around the match."""
    if len(sentence) <= width:
        return sentence
    start = max(0, min(match.start() - width // 3, len(sentence) - width))
    cut = sentence[start:start + width].strip()
    return ("…" if start else "") + cut + ("…" if start + width < len(sentence) else "")


def _customers_words_blanked(sentence: str, customer: str) -> str:
    """`sentence` with what quotes the customer blanked out: a quotation of their words, or a "Re:" line
    of their subject. Quoting them is not promising (an amount of money still counts: it is read unblanked)."""
    said = _flat(customer)
    if sentence.lower().startswith("re:") and _flat(sentence[3:]) in said:
        return ""
    return _QUOTATION.sub(lambda m: " " * len(m.group(0)) if _flat(m.group(0)[1:-1]) in said else m.group(0),
                          sentence)


def promises_found(text: str, *, phrases: dict[str, list[str]], money: bool, articles: list[str],
                   customer: str = "") -> list[str]:
    """What in `text` promises money, a refund, credit, replacement, compensation or a date: each the
    sentence it is in, once. `customer` is what the customer wrote (their words quoted back are not ours)."""
    patterns = [phrase_pattern(p) for lang in sorted(phrases) for p in phrases[lang]]
    found = []
    for sentence in sentences_unquoted(text, articles=articles):
        ours = _customers_words_blanked(sentence, customer) if customer else sentence
        match = next((m for m in (p.search(ours) for p in patterns) if m), None)
        if match is None and money:
            match = MONEY.search(sentence)
        if match is not None:
            found.append(_around(sentence, match))
    return found
