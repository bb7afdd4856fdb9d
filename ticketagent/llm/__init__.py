"""The model boundary: the schemas a model must produce, the offline model, the OpenAI client.

`clients.get_model_client()` returns the OpenAI client when OPENAI_API_KEY is
set, else the offline model: deterministic rules producing the same schemas.
Every failure leaves this package as a `base.ModelError` with a kind the
operators can act on.
"""
