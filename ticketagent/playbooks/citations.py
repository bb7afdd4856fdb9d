"""Articles a reply cites: a title in quotation marks after a cue ("see our article “…”") must be one of the
playbook's articles.

The cues are the playbook's (`checks.article_cues`, a list per language;
every list is read against every reply). A quotation without a cue before
it in its sentence -- the ticket's subject, the customer's own words -- is
not a citation. Titles compare in any case, without surrounding
punctuation and with spaces folded.
"""

import re

# “…” ‘…’ "…" „…“ «…» 「…」 『…』, and '…' when it does not look like an apostrophe
_QUOTED = re.compile(r"“([^”\n]{2,200})”|„([^“”\n]{2,200})[“”]|«\s?([^»\n]{2,200}?)\s?»|\"([^\"\n]{2,200})\""
                     r"|「([^」\n]{2,200})」|『([^』\n]{2,200})』|‘([^’\n]{2,200})’|(?<!\w)'([^'\n]{2,200})'(?!\w)")
_CUE_WINDOW = 60  # characters before the opening quotation mark, within its sentence


def _title(text: str) -> str:
    return " ".join(text.split()).strip(" .,:;!?-–—").casefold()


def _cue_pattern(cues: dict[str, list[str]]) -> re.Pattern | None:
    words = sorted({c for lang in cues for c in cues[lang]}, key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(r"\s+".join(map(re.escape, w.split())) for w in words) + r")(?!\w)",
                      re.I)


def titles_unknown(text: str, *, titles: list[str], cues: dict[str, list[str]]) -> list[str]:
    """The titles `text` cites (a quotation after a cue) that are not among `titles`, each once."""
    cue = _cue_pattern(cues)
    if cue is None:
        return []
    known = {_title(t) for t in titles}
    unknown = []
    for match in _QUOTED.finditer(text):
        quoted = next(g for g in match.groups() if g is not None)
        before = re.split(r"[.!?。！？\n]", text[max(0, match.start() - _CUE_WINDOW):match.start()])[-1]
        if cue.search(before) and _title(quoted) not in known and quoted.strip() not in unknown:
            unknown.append(quoted.strip())
    return unknown
