"""Template context every page shares: which model the agent runs on."""

from ticketagent.llm.clients import model_label


def product(request):
    return {"model_label": model_label()}
