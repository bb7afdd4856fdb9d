"""Reply checks: code reads every draft before anything is sent, and names what is wrong with it.

A draft that fails a check is not sent as it is: the actions that carry it
wait for a person's approval, with the failed checks named. The checks are
the playbook's (`checks`, `reply.max_chars`); each is plain code:

- `too_short` / `too_long`: the reply's length (without the signature);
- `scaffolding`: the model's working leaked into the reply -- a "Triage:"
  line, JSON, the instructions it was given;
- `made_up_contact`: a phone number, URL or email address that appears in
  none of the ticket, the playbook (guidance, signature) or its articles;
- `wrong_language`: the reply is written, with confidence, in another
  language than the one it should be in.
"""

import json
import re

from ticketagent.playbooks.spec import PlaybookSpec

_LABEL_LINE = re.compile(r"^\s*(triage|reply|decision|summary|category|sentiment|actions)\s*:", re.I | re.M)
_JSON_KEYS = re.compile(r"\"(subject|body|category|priority|sentiment|actions|summary)\"\s*:")
_SYSTEM_WORDS = ("you are a support-ticket assistant", "untrusted customer input", "requested schema")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"')\]]+", re.I)
_PHONE = re.compile(r"(?<![\w/])\+?\d[\d ().-]{5,}\d(?![\w/])")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{1,2}[./-]\d{1,2}[./-]\d{2,4}$")
_STOPWORDS = {
    "en": "the and you your to of is for we our with this that have please thank be are it not can will",
    "de": "und der die das sie ihr ihre ist nicht wir mit für bitte danke ein eine zu den auf wird haben",
    "fr": "le la les et vous votre est pas nous avec pour merci une un des du sur dans sera avons bien",
    "es": "el la los las y usted su es no nosotros con para gracias una un del que por será hemos muy",
    "it": "il lo la gli le e lei suo è non noi con per grazie una un del che sarà abbiamo",
    "pt": "o a os as e você seu sua é não nós com para obrigado uma um do que será temos",
    "nl": "de het een en u uw is niet wij met voor bedankt dank van dat zal hebben",
}
_WORDS = {lang: frozenset(words.split()) for lang, words in _STOPWORDS.items()}


def reply_check(spec: PlaybookSpec, *, reply: dict, ticket: dict, triage: dict) -> list[dict]:
    """The checks the draft fails, each {"check": name, "detail": what was found}."""
    body = _without_signature(reply.get("body", ""), spec.reply.signature)
    failed = []
    length = len(body.strip())
    if length < spec.checks.min_chars:
        failed.append(_fail("too_short", f"the reply is {length} characters long; the playbook asks for at least "
                                         f"{spec.checks.min_chars}"))
    if length > spec.reply.max_chars:
        failed.append(_fail("too_long", f"the reply is {length} characters long; the playbook allows "
                                        f"{spec.reply.max_chars}"))
    if spec.checks.scaffolding:
        leaked = scaffolding_found(f"{reply.get('subject', '')}\n{body}", spec)
        if leaked:
            failed.append(_fail("scaffolding", leaked))
    if spec.checks.made_up_contacts:
        unknown = contacts_unknown(f"{reply.get('subject', '')}\n{body}", known=_known_text(spec, ticket))
        if unknown:
            failed.append(_fail("made_up_contact", "not in the ticket, the playbook or its articles: "
                                + ", ".join(unknown[:5])))
    if spec.checks.language:
        expected = reply_language(spec, ticket=ticket, triage=triage)
        found = language_detect(body)
        if expected and found and found != expected:
            failed.append(_fail("wrong_language", f"written in {found!r}; the reply should be in {expected!r}"))
    return failed


def _fail(check: str, detail: str) -> dict:
    return {"check": check, "detail": detail[:500]}


def _without_signature(body: str, signature: str) -> str:
    body = body.rstrip()
    return body[: -len(signature)].rstrip() if signature and body.endswith(signature) else body


def scaffolding_found(text: str, spec: PlaybookSpec) -> str:
    """What of the model's working shows in `text`, in a few words ("" when nothing)."""
    label = _LABEL_LINE.search(text)
    if label:
        return f"a {label.group(1).capitalize()!r} line"
    stripped = text.strip()
    if _JSON_KEYS.search(text) or _is_json(stripped.split("\n", 1)[-1].strip()):
        return "JSON instead of a reply"
    lowered = " ".join(text.casefold().split())
    for words in _SYSTEM_WORDS:
        if words in lowered:
            return "the instructions it was given"
    for section in (spec.guidance.tone, spec.guidance.policies, spec.guidance.escalation, spec.guidance.other):
        for line in section.splitlines():
            line = " ".join(line.casefold().split())
            if len(line) >= 40 and line in lowered:
                return "a line of the playbook's guidance"
    return ""


def _is_json(text: str) -> bool:
    if text[:1] not in ("{", "["):
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _known_text(spec: PlaybookSpec, ticket: dict) -> str:
    parts = [ticket.get("subject", ""), ticket.get("body", ""), ticket.get("customer_email", ""),
             json.dumps(ticket.get("metadata") or {}), spec.reply.signature, *spec.guidance.model_dump().values()]
    parts += [f"{a.title}\n{a.body}" for a in spec.articles if a.enabled]
    return "\n".join(parts)


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


def contacts_unknown(text: str, *, known: str) -> list[str]:
    """The contact details in `text` that `known` does not contain (a phone matches by its digits)."""
    found, allowed = contacts_found(text), contacts_found(known)
    unknown = [f"phone {p}" for p in sorted(found["phone"])
               if not any(p.endswith(k) or k.endswith(p) for k in allowed["phone"])]
    unknown += [f"URL {u}" for u in sorted(found["url"])
                if not any(u == k or u.startswith(k + "/") for k in allowed["url"])]
    unknown += [f"email {e}" for e in sorted(found["email"] - allowed["email"])]
    return unknown


def reply_language(spec: PlaybookSpec, *, ticket: dict, triage: dict) -> str:
    """The primary language code the reply should be in ("" when unknown)."""
    code = spec.reply.language if spec.reply.language != "ticket" else (
        ticket.get("language") or (triage or {}).get("language") or "")
    code = code.lower().split("-")[0].split("_")[0]
    return code if code and code != "und" else ""


def language_detect(text: str) -> str:
    """The language `text` is written in, when that is clear ("" when it is not)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return ""
    kana = sum(1 for c in letters if "\u3040" <= c <= "\u30ff")
    han = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff")
    hangul = sum(1 for c in letters if "\uac00" <= c <= "\ud7af")
    if (kana + han + hangul) / len(letters) > 0.3:
        return "ja" if kana else ("ko" if hangul > han else "zh")
    words = re.findall(r"[^\W\d_]+", text.casefold())
    scores = sorted(((sum(1 for w in words if w in vocab), lang) for lang, vocab in _WORDS.items()), reverse=True)
    (best, lang), (second, _) = scores[0], scores[1]
    return lang if best >= 4 and best >= 2 * second else ""
