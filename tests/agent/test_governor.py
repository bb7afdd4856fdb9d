"""The model API's governor on a real Redis: each rule that makes a caller wait, and what ends the wait.

Every test has an endpoint of its own (its keys), so nothing carries over. A caller that must wait is
given a deadline a moment away: `Waited` says what it waited for (no timing is asserted).
"""

import time
import uuid

import pytest

from ticketagent.governor import Governor, Waited

pytestmark = pytest.mark.usefixtures("redis_conn")


@pytest.fixture
def governor(redis_conn, settings):
    settings.OPENAI_RPM = settings.OPENAI_TPM = settings.OPENAI_MAX_CONCURRENCY = None
    settings.OPENAI_TIMEOUT = 5.0
    settings.MODEL_PROBE_MAX_SECONDS = 8.0
    found = Governor(redis_conn, f"http://governor.test/{uuid.uuid4().hex}|model")
    _not_at_the_end_of_a_minute(found)
    yield found
    for key in redis_conn.scan_iter(found.key + ":*"):
        redis_conn.delete(key)


def _not_at_the_end_of_a_minute(governor):
    """The per-minute counters start again at a minute's turn: a test that counts waits until it has
    a few seconds of one minute ahead of it."""
    left = 60 - governor.now() % 60
    if left < 4:
        time.sleep(left + 0.05)


def soon() -> float:
    return time.monotonic() + 0.3


def waited(governor) -> str:
    with pytest.raises(Waited) as caught:
        with governor.turn(give_up=soon()):
            pass
    return caught.value.why


def inflight(governor) -> int:
    return governor.r.zcard(governor._k("inflight"))


def test_a_turn_holds_a_slot_counts_its_request_and_gives_the_slot_back(governor):
    with governor.turn(give_up=soon()) as turn:
        assert inflight(governor) == 1 and not turn.probing
        turn.answered({}, 120)
    assert inflight(governor) == 0
    minute = int(governor.now() // 60)
    assert int(governor.r.get(governor._k(f"rpm:{minute}"))) == 1
    assert int(governor.r.get(governor._k(f"tpm:{minute}"))) == 120


def test_the_slot_is_given_back_when_the_call_raises(governor):
    with pytest.raises(RuntimeError):
        with governor.turn(give_up=soon()):
            raise RuntimeError("the call broke")
    assert inflight(governor) == 0


def test_requests_per_minute_make_the_next_caller_wait(governor, settings):
    settings.OPENAI_RPM = 2
    for _ in range(2):
        with governor.turn(give_up=soon()) as turn:
            turn.answered({}, 0)
    assert waited(governor) == "the requests of this minute reached OPENAI_RPM=2"


def test_tokens_per_minute_make_the_next_caller_wait(governor, settings):
    settings.OPENAI_TPM = 100
    with governor.turn(give_up=soon()) as turn:
        turn.answered({}, 100)
    with governor.turn(give_up=soon()) as turn:  # at the limit, not past it
        turn.answered({}, 1)
    assert waited(governor) == "the tokens of this minute reached OPENAI_TPM=100"


def test_limits_are_learned_from_the_apis_headers_when_not_set(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.answered({"x-ratelimit-limit-requests": "1", "x-ratelimit-limit-tokens": "90000"}, 10)
    assert waited(governor) == "the requests of this minute reached OPENAI_RPM=1"


def test_a_setting_wins_over_a_learned_limit(governor, settings):
    settings.OPENAI_RPM = 5
    with governor.turn(give_up=soon()) as turn:
        turn.answered({"x-ratelimit-limit-requests": "1"}, 0)
    with governor.turn(give_up=soon()):
        pass


def test_the_concurrency_cap_makes_a_caller_wait_for_a_slot(governor, settings):
    settings.OPENAI_MAX_CONCURRENCY = 1
    with governor.turn(give_up=soon()):
        assert waited(governor) == "the calls in flight are at OPENAI_MAX_CONCURRENCY"
        assert inflight(governor) == 1
    with governor.turn(give_up=soon()):
        pass


def test_the_slot_of_a_caller_that_died_mid_call_expires(governor, settings):
    settings.OPENAI_MAX_CONCURRENCY = 1
    governor.r.zadd(governor._k("inflight"), {"dead-caller": governor.now() - 1})
    with governor.turn(give_up=soon()):
        assert governor.r.zscore(governor._k("inflight"), "dead-caller") is None


def test_a_429_makes_everyone_wait_its_retry_after(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.rate_limited(30.0)
    assert waited(governor) == "waiting for the model API's rate limit"
    until = float(governor.r.get(governor._k("backoff_until")))
    assert 25 < until - governor.now() <= 30


def test_a_shorter_back_off_never_cuts_a_longer_one(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.rate_limited(30.0)
    governor._back_off(governor.now() + 1, "a 429")
    assert float(governor.r.get(governor._k("backoff_until"))) - governor.now() > 25


def test_nothing_remaining_until_a_reset_makes_everyone_wait(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.answered({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s"}, 0)
    assert waited(governor) == "waiting for the model API's rate limit"


def test_an_outage_lets_one_caller_probe_and_its_answer_ends_it_for_all(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.unreachable()
    assert governor.down_since() is not None
    governor.r.delete(governor._k("backoff_until"))  # the outage's first back-off is over
    with governor.turn(give_up=soon()) as probe:
        assert probe.probing
        assert waited(governor).startswith("waiting for the model API since ")
        probe.answered({}, 0)
    assert governor.down_since() is None
    with governor.turn(give_up=soon()) as turn:
        assert not turn.probing
    assert governor.r.get(governor._k("probe")) is None


def test_a_probe_that_gets_no_answer_lets_the_next_one_probe_after_the_back_off(governor):
    with governor.turn(give_up=soon()) as turn:
        turn.unreachable()
    governor.r.delete(governor._k("backoff_until"))
    with governor.turn(give_up=soon()) as probe:
        assert probe.probing
        probe.unreachable()
    assert governor.r.get(governor._k("probe")) is None  # given back with the slot
    assert int(governor.r.get(governor._k("failures"))) == 2
    assert 1 < float(governor.r.get(governor._k("backoff_until"))) - governor.now() <= 2
