"""Only operators (and superusers) change the RQ queue through django-rq's pages; other staff may look.

django-rq's views (mounted at /admin/rq/ and again inside the admin, as
``admin:django_rq_*``) check only ``is_staff``: any staff member could empty
the queue, delete or requeue jobs, or stop a running one, while the same
person gets 403 on the dashboard's Pause. Every state-changing request to
those views goes through the same operator check as the dashboard's actions
(``ticketagent.web.access.is_operator``). Reading them stays staff-only, as
django-rq decides.
"""

from ticketagent.web.access import is_operator
from ticketagent.web.middleware import SAFE_METHODS, plain_answer

QUEUE_NAMESPACE = "django_rq"
ADMIN_QUEUE_PREFIX = "django_rq_"  # the same views registered by django-rq's admin entry


def is_queue_view(match) -> bool:
    if match is None:
        return False
    if QUEUE_NAMESPACE in match.namespaces:
        return True
    return "admin" in match.namespaces and (match.url_name or "").startswith(ADMIN_QUEUE_PREFIX)


class QueueChangesByOperatorsMiddleware:
    """403 for a POST (or any unsafe method) to django-rq's views by staff who are not operators."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method in SAFE_METHODS or not is_queue_view(request.resolver_match):
            return None
        if not request.user.is_authenticated or not request.user.is_staff or is_operator(request.user):
            return None  # django-rq's own staff check answers the others (a redirect to the admin login)
        return plain_answer(request, 403, "Only operators may change the queue: staff who are not operators may "
                                          "look at it but not empty it, delete, requeue or stop jobs. Nothing was "
                                          "changed.", "Not allowed")
