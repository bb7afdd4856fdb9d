"""/metrics in Prometheus text format, from the database at scrape time.

A custom collector rather than process-local counters: workers are forked
and many, and the database already holds every number (events and ledger
rows), so any web process can answer for all of them.
"""

import hmac

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ticketagent.selectors import health_numbers


class LedgerCollector:
    def collect(self):
        h = health_numbers()
        yield CounterMetricFamily("ticketagent_resumes", "Tasks resumed by an operator or command.", value=h["resumes"])
        yield CounterMetricFamily("ticketagent_recoveries", "Items taken over after their lease expired.",
                                  value=h["recoveries"])
        yield GaugeMetricFamily("ticketagent_unknown_effects", "Effects whose outcome is unknown.", value=h["unknown"])
        yield GaugeMetricFamily("ticketagent_unknown_oldest_age_seconds", "Age of the oldest unknown effect.",
                                value=h["unknown_oldest_seconds"])
        yield CounterMetricFamily("ticketagent_blocked_duplicates", "Effect intents refused by the dedupe gate.",
                                  value=h["blocked_duplicates"])
        items = GaugeMetricFamily("ticketagent_items", "Items by state.", labels=["state"])
        for state, n in sorted(h["items_by_state"].items()):
            items.add_metric([state], n)
        yield items
        effects = GaugeMetricFamily("ticketagent_effects", "Effects by state.", labels=["state"])
        for state, n in sorted(h["effects_by_state"].items()):
            effects.add_metric([state], n)
        yield effects
        tasks = GaugeMetricFamily("ticketagent_tasks", "Tasks by status.", labels=["status"])
        for state, n in sorted(h["tasks_by_state"].items()):
            tasks.add_metric([state], n)
        yield tasks


def _authorized(request) -> bool:
    if request.user.is_authenticated:
        return True
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    return bool(token) and header.startswith("Bearer ") and hmac.compare_digest(header[7:], token)


@require_GET
def metrics_view(request):
    if not _authorized(request):
        response = HttpResponse("login or a bearer token (METRICS_TOKEN) is required\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = "Bearer"
        return response
    registry = CollectorRegistry()
    registry.register(LedgerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
