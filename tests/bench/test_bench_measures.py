"""The bench's own measures, on made-up numbers: what "every slot busy" counts, a size changed from the
command line, a model whose answers take varying times. No database, no timing."""

import statistics

import pytest

from ops.bench.inflight import steady_rate
from ops.bench.sizes import QUICK, sizes_changed
from ops.fake_model.server import FakeOpenAIServer


def test_the_rate_with_the_queue_full_is_slots_over_an_items_time():
    # two slots, items of 2 s back to back: 1 item/s, however the run fills and drains
    times = [(0, 2), (0, 2), (2, 4), (2, 4), (4, 6), (4, 6), (6, 8), (6, 8)]
    assert steady_rate(times, 2) == pytest.approx(1.0)
    # a slow drain (the last item took 22 s more) lowers the whole run's rate; the rate with the queue full
    # sees only the longer mean time of an item
    assert steady_rate([*times[:-1], (6, 30)], 2) == pytest.approx(2 / ((14 + 24) / 8))
    # a slot idle for 1 s between two items is the system's time, and counted: 2 items every 3 s
    assert steady_rate([(0, 2), (0, 2), (3, 5), (3, 5), (6, 8), (6, 8)], 2) == pytest.approx(2 / 3)
    # items that start together and end at different times (a model whose answers vary): both slots always
    # busy, 2 s an item on average, 1 item/s -- the burst of ends after the first wave is not counted as a rate
    assert steady_rate([(0, 1), (0, 3), (1, 3), (3, 5), (3, 5), (5, 7)], 2) == pytest.approx(1.0)


def test_a_run_too_short_to_fill_its_slots_has_no_rate_with_the_queue_full():
    assert steady_rate([(0, 2), (0, 2)], 2) is None
    assert steady_rate([(0, 2)], 2) is None
    assert steady_rate([], 1) is None


def test_a_size_is_changed_in_its_own_type_and_a_wrong_one_is_named():
    sizes = sizes_changed(QUICK, ["inflight_threads=50,100", "inflight_split=2x50,4x25", "inflight_spread=0",
                                  "peer_items=300"])
    assert sizes.inflight_threads == (50, 100) and sizes.inflight_split == ((2, 50), (4, 25))
    assert sizes.inflight_spread == 0.0 and sizes.peer_items == 300 and sizes.name == "quick"
    assert sizes_changed(QUICK, ["inflight_split="]).inflight_split == ()
    with pytest.raises(ValueError, match="'peer_itemz=3': expected NAME=VALUE"):
        sizes_changed(QUICK, ["peer_itemz=3"])
    with pytest.raises(ValueError, match="'x' is not a value for peer_items"):
        sizes_changed(QUICK, ["peer_items=x"])


def test_the_fake_models_spread_keeps_the_mean_and_its_bounds():
    fixed = FakeOpenAIServer(latency=2.0)
    assert {fixed.latency_drawn() for _ in range(5)} == {2.0}
    varied = FakeOpenAIServer(latency=2.0, spread=0.25)
    drawn = [varied.latency_drawn() for _ in range(4000)]
    assert 1.5 <= min(drawn) and max(drawn) <= 2.5
    assert statistics.mean(drawn) == pytest.approx(2.0, abs=0.03)
    assert statistics.pstdev(drawn) > 0.2


def test_a_side_that_did_not_call_the_model_is_not_a_measure_of_its_speed():
    from types import SimpleNamespace

    from ops.bench.inflight import calls_made

    answered = {"completions": 100}
    bench = SimpleNamespace(procs=SimpleNamespace(model_calls=lambda url: answered), results=SimpleNamespace(notes=[]))
    assert calls_made(bench, "http://model/v1", {"completions": 40}, 20, "ours")  # 60 calls for 20 items
    assert bench.results.notes == []
    # 250 workflows "done" with no call made: replayed from an earlier run's records
    assert not calls_made(bench, "http://model/v1", {"completions": 100}, 250, "DBOS 50")
    assert bench.results.notes == ["in flight, DBOS 50: 250 items ended after 0 model calls, not 750: not a "
                                   "measure of the model's speed"]
