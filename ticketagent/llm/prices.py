"""The price table: what a model call costs in USD, from its tokens, frozen into its step's event when it is recorded.

Prices are USD per 1M tokens: input, cached input (prompt tokens the API
served from its cache) and output. The defaults below are OpenAI's list
prices (standard tier, mid-2025): check them against the provider's pricing
page before relying on a total. The setting MODEL_PRICES (JSON, read by
`env.envprices`) overrides or adds models. A model on this machine (a
loopback OPENAI_BASE_URL, as `MODEL=local make run` starts) costs 0 unless
MODEL_PRICES names it; any other model without a price has an unknown cost
(shown "—"), and its tokens still count.

A model is found by its name or a dated snapshot of it: the API answers
`gpt-4o-mini-2024-07-18` for `gpt-4o-mini`. A cost is recorded as a decimal
string of USD (`"0.000403"`), rounded to the nano-dollar: exact for every
price with at most three decimals per 1M tokens, as list prices are.
"""

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings

from ticketagent.llm.base import Usage, endpoint_is_local

PER_TOKENS = Decimal(1_000_000)
NANO = Decimal("0.000000001")


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens."""

    input: Decimal
    cached_input: Decimal
    output: Decimal

    def cost(self, *, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> Decimal:
        """Cached prompt tokens at the cached price, the rest of the prompt at the input price, the completion at
        the output price; rounded to the nano-dollar."""
        cached = min(cached_tokens, prompt_tokens)
        usd = ((prompt_tokens - cached) * self.input + cached * self.cached_input
               + completion_tokens * self.output) / PER_TOKENS
        return usd.quantize(NANO, rounding=ROUND_HALF_UP)


def _price(input_usd: str, cached_usd: str, output_usd: str) -> Price:
    return Price(Decimal(input_usd), Decimal(cached_usd), Decimal(output_usd))


# OpenAI's list prices, USD per 1M tokens (input, cached input, output): check them against the provider's page.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": _price("2.50", "1.25", "10.00"),
    "gpt-4o-mini": _price("0.15", "0.075", "0.60"),
    "gpt-4.1": _price("2.00", "0.50", "8.00"),
    "gpt-4.1-mini": _price("0.40", "0.10", "1.60"),
    "gpt-4.1-nano": _price("0.10", "0.025", "0.40"),
    "o3": _price("2.00", "0.50", "8.00"),
    "o4-mini": _price("1.10", "0.275", "4.40"),
}
FREE = Price(Decimal(0), Decimal(0), Decimal(0))


def _longest(names, model: str) -> str | None:
    """The name `model` is, or is a dated snapshot of (the longest name that fits)."""
    fits = [name for name in names if model == name or model.startswith(f"{name}-")]
    return max(fits, key=len) if fits else None


def price_of(model: str, *, local: bool = False) -> Price | None:
    """The price of `model`: the most specific name in MODEL_PRICES and the list prices together (MODEL_PRICES
    first on the same name); 0 for a model on this machine (`local`) that MODEL_PRICES does not name; None when
    no price is known."""
    model = (model or "").strip().lower()
    configured = settings.MODEL_PRICES
    name = _longest([*configured, *DEFAULT_PRICES], model)
    if name in configured:
        return Price(configured[name]["input"], configured[name]["cached_input"], configured[name]["output"])
    if local:
        return FREE
    return DEFAULT_PRICES.get(name) if name else None


def configured_price() -> Price | None:
    """The price of the model this process is configured for (the offline model costs nothing)."""
    if not settings.OPENAI_API_KEY:
        return FREE
    return price_of(settings.OPENAI_MODEL, local=endpoint_is_local(settings.OPENAI_BASE_URL))


def usage_priced(usage: Usage) -> dict:
    """What a model step's STEP_DONE event records of its calls (`Usage.as_dict()`) and, when the model has a
    price, `cost_usd`: what they cost by the table now, as a decimal string. Nothing when no call was made."""
    record = usage.as_dict()
    if record:
        price = price_of(usage.model, local=endpoint_is_local(settings.OPENAI_BASE_URL))
        if price is not None:
            record["cost_usd"] = decimal_text(price.cost(prompt_tokens=usage.prompt_tokens,
                                                         cached_tokens=usage.cached_tokens,
                                                         completion_tokens=usage.completion_tokens))
    return record


def decimal_text(amount: Decimal) -> str:
    """An amount as plain decimal text, without exponent or trailing zeros: `0.000403`, `5`."""
    return format(amount.normalize(), "f")


def dollars(amount) -> str:
    """How the pages write an amount of USD: "—" when it is unknown, cents from a dollar up ("$4.98"), four
    significant digits below ("$0.000403"), so that a cheap call never reads as $0.00."""
    if amount is None or amount == "":
        return "—"
    value = Decimal(str(amount))
    if value == 0:
        return "$0.00"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    shown = decimal_text(value.quantize(Decimal(1).scaleb(value.adjusted() - 3), rounding=ROUND_HALF_UP))
    whole, _, cents = shown.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"
