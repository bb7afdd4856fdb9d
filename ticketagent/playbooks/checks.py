"""Reply checks: code reads every draft before anything is sent, and names what is wrong with it.

A draft that fails a check is not sent as it is: the actions that carry it
wait for a person's approval, with the failed checks named and what each
matched. The checks are the playbook's (`checks`, `reply.max_chars`); each
is plain code:

- `too_short` / `too_long`: the reply's length (without the signature);
- `scaffolding`: the model's working leaked into the reply -- a "Triage:"
  line, JSON, the instructions it was given (the playbook's guidance said
  word for word is a `secret`);
- `promise`: a phrase of the playbook's promise lists (a refund approved,
  credit, a replacement, compensation, a date), or an amount of money;
- `secret`: a key or token, a password or one-time code, a note written
  for the team only (a ticket's internal field, the playbook's guidance);
  shown masked;
- `personal_data`: the customer's phone, street address or email copied
  from the ticket into the reply;
- `made_up_contact`: a phone number, URL or email address that is neither
  on the playbook's allow-list nor in its own text (the ticket is not a
  source: "a number I found online");
- `unknown_article`: a cited title that is not one of the playbook's
  articles;
- `wrong_language`: the reply is written, with confidence, in another
  language than the one it should be in.
"""

import json
import re

from ticketagent.playbooks.citations import titles_unknown
from ticketagent.playbooks.contacts import contacts_unknown, personal_data_echoed
from ticketagent.playbooks.leaks import secrets_found
from ticketagent.playbooks.promises import promises_found
from ticketagent.playbooks.spec import PlaybookSpec, placeholders_fill

_LABEL_LINE = re.compile(r"^\s*(triage|reply|decision|summary|category|sentiment|actions)\s*:", re.I | re.M)
_JSON_KEYS = re.compile(r"\"(subject|body|category|priority|sentiment|actions|summary)\"\s*:")
_SYSTEM_WORDS = ("you are a support-ticket assistant", "untrusted customer input", "requested schema")
_STOPWORDS = {
    "en": "the and you your to of is for we our with this that have please thank be are it not can will "
          "where what how why when my me hello hi help password refund invoice thanks i was were am did see",
    "de": "und der die das sie ihr ihre ist nicht wir mit für bitte danke ein eine zu den auf wird haben",
    "fr": "le la les et vous votre est pas nous avec pour merci une un des du sur dans sera avons bien",
    "es": "el la los las y usted su es no nosotros con para gracias una un del que por será hemos muy",
    "it": "il lo la gli le e lei suo è non noi con per grazie una un del che sarà abbiamo",
    "pt": "o a os as e você seu sua é não nós com para obrigado uma um do que será temos",
    "nl": "de het een en u uw is niet wij met voor bedankt dank van dat zal hebben",
}
_WORDS = {lang: frozenset(words.split()) for lang, words in _STOPWORDS.items()}
_MARKUP = re.compile(r"<[^<>]{0,200}>")


def reply_check(spec: PlaybookSpec, *, reply: dict, ticket: dict, triage: dict) -> list[dict]:
    """The checks the draft fails, each {"check": name, "detail": what was found, "matched": [each match]}."""
    checks = spec.checks
    body = _without_signature(reply.get("body", ""), spec.reply.signature)
    text = f"{reply.get('subject', '')}\n{body}"
    failed = _length_failed(spec, body)
    if checks.scaffolding:
        leaked = scaffolding_found(text, spec)
        if leaked:
            failed.append(_fail("scaffolding", leaked))
    failed += _content_failed(spec, text, ticket)
    failed += _contacts_failed(spec, text, ticket)
    if checks.language:
        expected = reply_language(spec, ticket=ticket, triage=triage)
        found = language_detect(body)
        if expected and found and found != expected:
            failed.append(_fail("wrong_language", f"written in {found!r}; the reply should be in {expected!r}"))
    return failed


def _length_failed(spec: PlaybookSpec, body: str) -> list[dict]:
    length, failed = len(body.strip()), []
    if length < spec.checks.min_chars:
        failed.append(_fail("too_short", f"the reply is {length} characters long; the playbook asks for at least "
                                         f"{spec.checks.min_chars}"))
    if length > spec.reply.max_chars:
        failed.append(_fail("too_long", f"the reply is {length} characters long; the playbook allows "
                                        f"{spec.reply.max_chars}"))
    return failed


def _content_failed(spec: PlaybookSpec, text: str, ticket: dict) -> list[dict]:
    """Promises, secrets and articles the playbook does not have."""
    checks, failed = spec.checks, []
    articles = [a for a in spec.articles if a.enabled]
    if checks.promises or checks.money:
        found = promises_found(text, phrases=checks.promise_phrases if checks.promises else {},
                               money=checks.money, articles=[a.body for a in articles],
                               customer=f"{ticket.get('subject', '')}\n{ticket.get('body', '')}")
        failed += _matched("promise", "promises money, a refund, credit, a replacement or a date", found, quoted=True)
    if checks.secrets:
        internal = [str((ticket.get("metadata") or {}).get(name) or "") for name in checks.internal_fields]
        guidance = [placeholders_fill(section, ticket) for section in spec.guidance.model_dump().values()]
        found = secrets_found(text, internal=internal, guidance=guidance, public=[a.body for a in articles])
        failed += _matched("secret", "gives away", found)
    if checks.article_titles:
        titles = titles_unknown(text, titles=[a.title for a in articles], cues=checks.article_cues)
        failed += _matched("unknown_article", "cites an article the playbook does not have", titles, quoted=True)
    return failed


def _contacts_failed(spec: PlaybookSpec, text: str, ticket: dict) -> list[dict]:
    """The customer's personal data copied back, contact details not on the allow-list."""
    ours, failed = _playbook_contacts(spec), []
    # the customer's whole subject quoted back ("Re: Order 1042 (2 items)") names their ticket: no contact is given
    words = text.replace(subject, " ") if (subject := (ticket.get("subject") or "").strip()) else text
    echoed = personal_data_echoed(words, ticket=ticket, allowed=ours) if spec.checks.personal_data else []
    failed += _matched("personal_data", "copies back the customer's", echoed)
    if spec.checks.made_up_contacts:
        unknown = contacts_unknown(words, known=ours)
        failed += _matched("made_up_contact", "not on the playbook's allow-list nor in its text", unknown)
    return failed


def _matched(check: str, what: str, found: list[str], *, quoted: bool = False) -> list[dict]:
    """One failed check listing what matched (none when nothing did)."""
    if not found:
        return []
    shown = [f"\u201c{f}\u201d" if quoted else f for f in found[:5]]
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return [{**_fail(check, f"{what}: " + "; ".join(shown) + more), "matched": [m[:200] for m in found[:5]]}]


def _playbook_contacts(spec: PlaybookSpec) -> str:
    """The text whose contact details a reply may give: the allow-list and the playbook's own words."""
    parts = [*spec.checks.contacts_allowed, spec.reply.signature, *spec.guidance.model_dump().values()]
    parts += [f"{a.title}\n{a.body}" for a in spec.articles if a.enabled]
    return "\n".join(parts)


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
    return ""


def _is_json(text: str) -> bool:
    if text[:1] not in ("{", "["):
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def reply_language(spec: PlaybookSpec, *, ticket: dict, triage: dict) -> str:
    """The primary language code the reply should be in ("" when unknown)."""
    code = spec.reply.language if spec.reply.language != "ticket" else (
        ticket.get("language") or (triage or {}).get("language") or "")
    code = code.lower().split("-")[0].split("_")[0]
    return code if code and code != "und" else ""


# Alphabets of one language, or of one that most tickets in it are (Cyrillic: Russian unless a letter says Ukrainian)
_SCRIPTS = (("ru", "\u0400", "\u04ff"), ("el", "\u0370", "\u03ff"), ("ar", "\u0600", "\u06ff"),
            ("he", "\u0590", "\u05ff"), ("th", "\u0e00", "\u0e7f"))


def language_detect(text: str, *, min_words: int = 4) -> str:
    """The language `text` is written in, when that is clear ("" when it is not): by its alphabet, else by its
    common words, at least `min_words` of them and twice as many as another language's (a reply is checked so;
    the offline model's triage asks one word more than any other language for a short ticket's)."""
    text = _MARKUP.sub(" ", text)  # a tag's names ("<a href=…>") are no words of the ticket's language
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return ""
    by_script = _script_language(letters)
    if by_script:
        return by_script
    # whole words only: the letters inside "8e0a76" or "A1B2" (an order number, a reference) are no "e" or "a"
    words = [w for w in re.findall(r"\w+", text.casefold()) if w.isalpha()]
    scores = sorted(((sum(1 for w in words if w in vocab), lang) for lang, vocab in _WORDS.items()), reverse=True)
    (best, lang), (second, _) = scores[0], scores[1]
    if min_words >= 4:
        return lang if best >= min_words and best >= 2 * second else ""
    return lang if best >= min_words and best > second else ""


def _script_language(letters: list[str]) -> str:
    """The language that `letters` (not empty) are mostly written in by their alphabet ("" for Latin or mixed)."""
    kana = sum(1 for c in letters if "\u3040" <= c <= "\u30ff")
    han = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff")
    hangul = sum(1 for c in letters if "\uac00" <= c <= "\ud7af")
    if (kana + han + hangul) / len(letters) > 0.3:
        return "ja" if kana else ("ko" if hangul > han else "zh")
    for lang, first, last in _SCRIPTS:
        if sum(1 for c in letters if first <= c <= last) / len(letters) > 0.5:
            return "uk" if lang == "ru" and any(c in "іїєґІЇЄҐ" for c in letters) else lang
    return ""
