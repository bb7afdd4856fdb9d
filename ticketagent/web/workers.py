"""The workers page: each worker and its item, the queue's depth per task, leases and what recovery did."""

from django.conf import settings
from django.views.decorators.http import require_GET

from ticketagent.web.access import login_required, render_page
from ticketagent.web.selectors import ops as selectors_ops


@login_required
@require_GET
def workers_page(request):
    return render_page(request, "workers.html", "workers-live", {
        "ops": selectors_ops.operations_overview(), "lease_seconds": settings.LEASE_SECONDS,
        "heartbeat_seconds": settings.HEARTBEAT_SECONDS})
