"""The live views' one change cursor: what the page shows.

A polled fragment carries in its own poll URL (`seen=`) the digest of what it
rendered; the poll renders the fragment again and answers 204 (nothing to
swap) while the digest is the same. Every change a page shows -- an item's
status, an effect's transition, an approval, the task's status, the model
API's outage, a count -- changes what is rendered, so no change can be
missed, whichever table it was written to. (An event id could miss them:
not every change appends an event.) The price is a render per poll (50-60
ms for a 5,000-item task page, docs/design.md); the browser's DOM, focus
and scroll stay untouched while nothing changed.

A template writes `seen={{ live_mark }}` in its poll URL; `LiveViews`, a
middleware, does the rest for every page.
"""

import hashlib
import re

from django.http import HttpResponse

LIVE_MARK = "live-mark-0"
# what changes from render to render without the page showing anything new: the masked CSRF token
_NOISE = re.compile(rb'name="csrfmiddlewaretoken" value="[^"]*"|"X-CSRFToken": "[^"]*"')


def live_digest(rendered: str | bytes) -> str:
    """The digest of a rendering (with the mark in it, as rendered), without what changes on every render."""
    content = rendered.encode() if isinstance(rendered, str) else rendered
    return hashlib.blake2b(_NOISE.sub(b"", content), digest_size=10).hexdigest()


class LiveViews:
    """Middleware: `live_answer()` for every HTML page and fragment."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        return live_answer(request, response)


def live_answer(request, response: HttpResponse) -> HttpResponse:
    """204 when the poll's `seen` is the digest of this rendering; else the rendering, with its digest in place
    of the mark (so the swapped-in fragment polls with it)."""
    content = response.content
    if LIVE_MARK.encode() not in content:
        return response
    digest = live_digest(content)
    if request.htmx and request.GET.get("seen") == digest and response.status_code == 200:
        return HttpResponse(status=204)
    response.content = content.replace(LIVE_MARK.encode(), digest.encode())
    return response
