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

from ledger.models import EffectState
from ticketagent.eventlog.usage import usage_total
from ticketagent.health import health_numbers
from ticketagent.models import ItemStatus, TaskStatus


def _by_state(name: str, documentation: str, label: str, counts: dict, states) -> GaugeMetricFamily:
    """Every known state, zeros included, so a rate or an alert never sees a missing series."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for state in sorted(set(states) | set(counts)):
        family.add_metric([state], counts.get(state, 0))
    return family


class LedgerCollector:
    def collect(self):
        h = health_numbers()
        yield CounterMetricFamily("ticketagent_resumes", "Tasks resumed by an operator or command.", value=h["resumes"])
        yield CounterMetricFamily("ticketagent_recoveries", "Items taken over after their lease expired.",
                                  value=h["recoveries"])
        yield GaugeMetricFamily("ticketagent_unknown_effects", "Effects whose outcome is unknown.", value=h["unknown"])
        yield GaugeMetricFamily("ticketagent_unknown_oldest_age_seconds",
                                "Seconds since the intent of the oldest unknown effect (0 when there is none).",
                                value=h["unknown_oldest_seconds"])
        yield CounterMetricFamily("ticketagent_blocked_duplicates", "Effect intents refused by the dedupe gate.",
                                  value=h["blocked_duplicates"])
        yield _by_state("ticketagent_items", "Items by state.", "state", h["items_by_state"], ItemStatus.values)
        yield _by_state("ticketagent_effects", "Effects by state.", "state", h["effects_by_state"], EffectState.values)
        yield _by_state("ticketagent_tasks", "Tasks by status.", "status", h["tasks_by_state"], TaskStatus.values)


class UsageCollector:
    """The model calls' tokens and cost, summed from their steps' events at scrape time (`eventlog.usage`)."""

    def collect(self):
        sums = usage_total()
        tokens = CounterMetricFamily("ticketagent_model_tokens", "Tokens of the model calls, by kind (cached: the "
                                     "part of the prompt tokens the API served from its cache).", labels=["kind"])
        for kind in ("prompt", "completion", "cached"):
            tokens.add_metric([kind], sums[f"{kind}_tokens"])
        yield tokens
        yield CounterMetricFamily("ticketagent_model_calls", "Model API calls recorded with their steps.",
                                  value=sums["calls"])
        yield CounterMetricFamily("ticketagent_model_cost_usd", "What the model calls cost in USD, by the price "
                                  "table when each was recorded (steps without a price are not in it).",
                                  value=float(sums["cost"]))
        yield CounterMetricFamily("ticketagent_model_unpriced_steps", "Model steps whose model had no price: "
                                  "their tokens count, their cost is unknown.", value=sums["unpriced"])


def _authorized(request) -> bool:
    if request.user.is_authenticated:
        return True
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())


@require_GET
def metrics_view(request):
    if not _authorized(request):
        response = HttpResponse("login or a bearer token (METRICS_TOKEN) is required\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = "Bearer"
        return response
    registry = CollectorRegistry()
    registry.register(LedgerCollector())
    registry.register(UsageCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
