"""The knowledge tool's search: a version's enabled articles, ranked by PostgreSQL full-text search.

Each article's `search` vector is written when the article is saved
(`article_vectors_refresh`): title weighs most, then tags, then the body.
A query matches an article that shares any of its words (each word a
`plainto_tsquery`, OR-ed), ranked by `ts_rank`; English stemming, so
"refunds" finds "refund".
"""

import re

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import F, Func, TextField, Value

from ticketagent.playbooks.models import Article

CONFIG = "english"
MAX_WORDS = 12


def article_vectors_refresh(*, version_id: int) -> None:
    """Write the search vector of every article of a version (after its articles changed)."""
    Article.objects.filter(version_id=version_id).update(search=(
        SearchVector("title", weight="A", config=CONFIG)
        + SearchVector(_tags_text(), weight="B", config=CONFIG)
        + SearchVector("body", weight="C", config=CONFIG)))


def _tags_text() -> Func:
    return Func(F("tags"), Value(" "), function="array_to_string", output_field=TextField())


def articles_search(*, version_id: int, query: str, limit: int = 3) -> list[dict]:
    """The best `limit` enabled articles of the version for `query` (any of its words), best first."""
    words = re.findall(r"[^\W_]+", query or "")[:MAX_WORDS]
    if not words:
        return []
    search = SearchQuery(words[0], config=CONFIG)
    for word in words[1:]:
        search |= SearchQuery(word, config=CONFIG)
    rows = (Article.objects.filter(version_id=version_id, enabled=True, search=search)
            .annotate(rank=SearchRank(F("search"), search)).order_by("-rank", "position", "id")
            .values("id", "title", "body", "tags")[:limit])
    return [{"id": r["id"], "title": r["title"], "body": r["body"], "tags": r["tags"]} for r in rows]
