"""Word lists read the way a person reads them: whole words, any case, with or without accents, in any script.

A phrase matches on word boundaries ("down" is not in "download"); a
trailing `*` matches any ending ("swell*": swelling, swollen is listed
apart), a `*` on its own up to three words ("# * bikes": 12 cargo bikes),
a `#` a number (captured: how the offline model reads a count); case and
accents are ignored on both sides ("aufgebläht" matches "AUFGEBLAHT"); in
scripts written without spaces (Chinese, Japanese) a phrase matches where
it occurs.
"""

import re
import unicodedata

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def plain(text: str) -> str:
    """`text` folded for matching: no case, no accents, one space between words, typographic quotes as '."""
    text = unicodedata.normalize("NFKD", str(text or "")).casefold()
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("ß", "ss")
    return " ".join(text.split())


def phrase_pattern(phrase: str) -> re.Pattern:
    """The pattern of one phrase of a word list (see the module's docstring)."""
    folded = plain(phrase)
    prefix = folded.endswith("*") and folded != "*" and not folded.endswith(" *")
    folded = folded.removesuffix("*") if prefix else folded
    body = ""
    for part in folded.split(" "):
        if part == "*":
            body += r"(?:\S+\s+){0,3}"
            continue
        token = re.escape(part).replace("\\#", "#").replace("#", r"(\d+)")
        body += token + r"\s*" if _CJK.search(part) else token + r"\s+"
    body = body.removesuffix(r"\s+").removesuffix(r"\s*")
    if _CJK.search(folded):
        return re.compile(body)
    return re.compile(r"(?<!\w)" + body + (r"\w*" if prefix else r"(?!\w)"))


def phrase_first(text: str, phrases) -> str | None:
    """The first of `phrases` found in `text` (as the list spells it), or None."""
    folded = plain(text)
    for phrase in phrases:
        if phrase_pattern(phrase).search(folded):
            return phrase
    return None
