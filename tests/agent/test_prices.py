"""The price table: list prices by model (and dated snapshot), MODEL_PRICES over them, 0 on this machine, exact costs."""

from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from ticketagent.env import envprices
from ticketagent.llm.base import Usage
from ticketagent.llm.prices import DEFAULT_PRICES, FREE, Price, configured_price, dollars, price_of, usage_priced


class TestPriceOf:
    def test_a_dated_snapshot_costs_what_its_model_costs_and_the_longest_name_wins(self):
        assert price_of("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES["gpt-4o-mini"]
        assert price_of("gpt-4o-2024-08-06") == DEFAULT_PRICES["gpt-4o"]
        assert price_of("gpt-4.1-nano-2025-04-14") == DEFAULT_PRICES["gpt-4.1-nano"]
        assert price_of("GPT-4.1") == DEFAULT_PRICES["gpt-4.1"]
        assert price_of("o4-mini") == DEFAULT_PRICES["o4-mini"]

    def test_an_unknown_model_has_no_price_unless_it_runs_on_this_machine(self):
        assert price_of("gpt-4oo") is None and price_of("mystery-model") is None
        assert price_of("SmolLM2-135M", local=True) == FREE
        assert price_of("gpt-4o", local=True) == FREE, "a model on this machine costs nothing"

    def test_model_prices_override_the_list_and_the_local_zero_and_add_models(self, settings):
        settings.MODEL_PRICES = {"gpt-4o": {"input": Decimal("1"), "cached_input": Decimal("0.5"),
                                            "output": Decimal("3")},
                                 "house-model": {"input": Decimal("0"), "cached_input": Decimal("0"),
                                                 "output": Decimal("0.2")}}
        assert price_of("gpt-4o-2024-08-06") == Price(Decimal("1"), Decimal("0.5"), Decimal("3"))
        assert price_of("house-model", local=True).output == Decimal("0.2")
        assert price_of("gpt-4o-mini") == DEFAULT_PRICES["gpt-4o-mini"], "others keep their list price"

    def test_the_configured_model(self, settings):
        settings.OPENAI_API_KEY = ""
        assert configured_price() == FREE, "the offline model costs nothing"
        settings.OPENAI_API_KEY, settings.OPENAI_MODEL = "sk-test", "mystery-model"
        settings.OPENAI_BASE_URL = "https://api.example.com/v1"
        assert configured_price() is None
        settings.OPENAI_BASE_URL = "http://127.0.0.1:8080/v1"
        assert configured_price() == FREE


class TestCost:
    def test_cached_prompt_tokens_cost_the_cached_price_and_the_sum_is_exact(self):
        price = DEFAULT_PRICES["gpt-4o-mini"]  # 0.15 / 0.075 / 0.60 per 1M
        cost = price.cost(prompt_tokens=1_000_000, cached_tokens=200_000, completion_tokens=500_000)
        assert cost == Decimal("0.12") + Decimal("0.015") + Decimal("0.30")
        one = price.cost(prompt_tokens=42, cached_tokens=0, completion_tokens=17)
        assert one == Decimal("0.0000165"), "42 x 0.15 + 17 x 0.60 micro-dollars"
        assert DEFAULT_PRICES["gpt-4.1-nano"].cost(prompt_tokens=1, cached_tokens=1, completion_tokens=0) == \
            Decimal("0.000000025")

    def test_a_step_records_its_cost_as_decimal_text_when_its_model_has_a_price(self, settings):
        settings.OPENAI_BASE_URL = None
        usage = Usage(calls=2, prompt_tokens=84, completion_tokens=34, cached_tokens=0, seconds=0.5,
                      model="gpt-4o-mini-2024-07-18")
        assert usage_priced(usage) == {"calls": 2, "prompt_tokens": 84, "completion_tokens": 34, "cached_tokens": 0,
                                       "ms": 500, "model": "gpt-4o-mini-2024-07-18", "cost_usd": "0.000033"}
        unknown = usage_priced(Usage(calls=1, prompt_tokens=10, completion_tokens=5, model="mystery-model"))
        assert "cost_usd" not in unknown and unknown["prompt_tokens"] == 10, "unknown cost, the tokens count"
        assert usage_priced(Usage()) == {}, "no call, nothing recorded"
        settings.OPENAI_BASE_URL = "http://localhost:8080/v1"
        assert usage_priced(Usage(calls=1, prompt_tokens=10, model="SmolLM2-135M"))["cost_usd"] == "0"


class TestDollars:
    @pytest.mark.parametrize("amount,shown", [
        (None, "—"), (Decimal(0), "$0.00"), (Decimal("4.98"), "$4.98"), (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0.5"), "$0.50"), (Decimal("0.228"), "$0.228"), (Decimal("0.0000165"), "$0.0000165"),
        (Decimal("0.123456"), "$0.1235"), ("0.076", "$0.076"), (Decimal("0.999996"), "$1.00"),
    ])
    def test_cents_from_a_dollar_four_significant_digits_below(self, amount, shown):
        assert dollars(amount) == shown


class TestModelPricesSetting:
    def test_json_prices_are_read_as_exact_decimals_and_cached_defaults_to_input(self, monkeypatch):
        monkeypatch.setenv("MODEL_PRICES", '{"My-Model": {"input": 0.1, "output": 0.3}, "b": {"input": 1, '
                                           '"cached_input": 0.25, "output": 2}}')
        prices = envprices("MODEL_PRICES")
        assert prices["my-model"] == {"input": Decimal("0.1"), "cached_input": Decimal("0.1"),
                                      "output": Decimal("0.3")}
        assert prices["b"]["cached_input"] == Decimal("0.25")
        monkeypatch.setenv("MODEL_PRICES", "")
        assert envprices("MODEL_PRICES") == {}

    @pytest.mark.parametrize("raw,words", [
        ("{gpt-4o: 1}", "is not JSON"),
        ('["gpt-4o"]', "must be a JSON object"),
        ('{"m": 2.5}', "MODEL_PRICES['m']: give"),
        ('{"m": {"input": 1}}', "'output' is missing"),
        ('{"m": {"input": 1, "output": 2, "reasoning": 3}}', "unknown key 'reasoning'"),
        ('{"m": {"input": -1, "output": 2}}', "input=Decimal('-1') is not a price"),
        ('{"m": {"input": "1", "output": 2}}', "input='1' is not a price"),
        ('{"m": {"input": true, "output": 2}}', "input=True is not a price"),
    ])
    def test_anything_else_stops_start_up_naming_the_variable(self, monkeypatch, raw, words):
        monkeypatch.setenv("MODEL_PRICES", raw)
        with pytest.raises(ImproperlyConfigured, match="MODEL_PRICES") as caught:
            envprices("MODEL_PRICES")
        assert words in str(caught.value)
