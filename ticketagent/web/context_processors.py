"""Template context every page shares: which model the agent runs on, and what needs a person (counted lazily)."""

from django.utils.functional import SimpleLazyObject

from ticketagent.llm.clients import model_label
from ticketagent.web.live import LIVE_MARK
from ticketagent.web.selectors.review import attention_counts


def product(request):
    return {"model_label": model_label(), "live_mark": LIVE_MARK}


def attention(request):
    """The header's counts: only counted when a page renders the header (never for a fragment)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"attention": SimpleLazyObject(attention_counts)}
