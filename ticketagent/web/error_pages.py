"""The product's own 404 and 500 pages with DEBUG on as well (`make run`), where Django would show its debug pages.

With DEBUG off Django renders templates/404.html and 500.html itself (its default handler404/handler500). With
DEBUG on it answers a page that matches no URL, or a view's Http404 or exception, with its debug pages: a wide
page of the URL patterns or a traceback, not what an operator should meet. Here the same default handlers render
the product's pages in their place; an exception's traceback goes to the log (the web process's output), as it
does with DEBUG off. Other errors (403, 400) are the product's pages already with DEBUG on.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core import signals
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404
from django.http.multipartparser import MultiPartParserError
from django.views import defaults

log = logging.getLogger("django.request")

# Django answers these itself with the product's 400/403 handling, DEBUG or not
_HANDLED_BY_DJANGO = (PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


class ProductErrorPages:
    """With DEBUG on: the product's 404 for a URL nothing matches and for a view's Http404, its 500 for a view's
    exception. Placed outside CommonMiddleware, so that a URL missing its slash is still redirected first."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # no view was resolved: the 404 is the URL resolver's (Django's debug page of every URL pattern)
        if settings.DEBUG and response.status_code == 404 and getattr(request, "resolver_match", None) is None:
            return defaults.page_not_found(request, Http404(request.path))
        return response

    def process_exception(self, request, exception):
        if not settings.DEBUG or isinstance(exception, _HANDLED_BY_DJANGO):
            return None
        if isinstance(exception, Http404):
            return defaults.page_not_found(request, exception)
        signals.got_request_exception.send(sender=None, request=request)
        log.error("Internal Server Error: %s", request.path, exc_info=exception,
                  extra={"status_code": 500, "request": request})
        return defaults.server_error(request)
