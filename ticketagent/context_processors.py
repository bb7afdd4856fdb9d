from django.conf import settings


def product(request):
    return {
        "model_label": f"OpenAI model {settings.OPENAI_MODEL}" if settings.OPENAI_API_KEY else "offline model",
    }
