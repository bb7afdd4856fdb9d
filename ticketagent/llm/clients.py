"""Which model this process talks to: the OpenAI client when OPENAI_API_KEY is set, else the offline model."""

from django.conf import settings

from ticketagent.llm.base import endpoint_label
from ticketagent.llm.fit import playbook_fit_problem
from ticketagent.llm.offline import OfflineModel
from ticketagent.llm.openai_client import OpenAIModel

if settings.OPENAI_API_KEY:
    # rq forks a work-horse per job from the worker process, which imports
    # this module at start (its recovery pass): importing the SDK here once
    # saves every item ~0.4 s of CPU re-importing it (docs/benchmarks.md, "Profiling").
    import httpx2  # noqa: F401
    import openai  # noqa: F401


_clients: dict[tuple, "OpenAIModel"] = {}


def get_model_client():
    """The model for this process. An OpenAI client (its connection pool) is
    built once per process and configuration, not once per item."""
    if not settings.OPENAI_API_KEY:
        return OfflineModel()
    config = (settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL, settings.OPENAI_MODEL, settings.OPENAI_TIMEOUT,
              settings.OPENAI_CONNECT_TIMEOUT, settings.OPENAI_MAX_RETRIES, settings.AGENT_MAX_STEPS)
    client = _clients.get(config)
    if client is None:
        _clients.clear()
        client = _clients[config] = OpenAIModel()
    return client


def model_label() -> str:
    """What the UI and each new task say the agent runs on: "offline model", "OpenAI model <name>", or, for
    a server on this machine (a loopback OPENAI_BASE_URL, e.g. `MODEL=local make run`), "local model: <name>"."""
    if not settings.OPENAI_API_KEY:
        return OfflineModel.label
    return endpoint_label(settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)


def publish_fit():
    """The check a playbook's publish runs (`playbooks.services.version_publish(fits=…)`): the model's context
    asked once, before the draft is locked (the endpoint may take seconds), then why a spec's prompts cannot fit
    it, with the numbers ("" when they fit, or when the endpoint does not say)."""
    context = get_model_client().context()
    return lambda spec: playbook_fit_problem(spec, context)
