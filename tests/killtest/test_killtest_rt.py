"""The kill test against a real Request Tracker, short version: RT's own ticket histories hold every committed effect
once and nothing else (docs/reliability.md has the long run)."""

import pytest
from django.core.management import call_command

from ops.rt_server import rt_missing
from tests.conftest import skip_or_fail

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_short_kill_test_against_request_tracker_passes(queue, capsys):
    """With an operator clicking Reconcile now at random moments and 10% of RT's reads failing behind a gateway
    (a 503, a connection closed unanswered, a stall): nothing twice, nothing lost, no item failed, no task
    suspended."""
    missing = rt_missing()
    if missing:
        skip_or_fail(missing)
    with pytest.raises(SystemExit) as exit_info:
        call_command("killtest", "--channel", "rt", "--rounds", "2", "--items", "5", "--workers", "2",
                     "--seed", "3", "--crash-probability", "0.2", "--operator", "--read-faults", "0.1")
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    assert "RT: keys never honoured, channel rt" in out
    assert "duplicates (once/irreversible)        0" in out and "lost items                            0" in out
    assert "items failed on the way               0" in out and "tasks suspended on the way            0" in out
    assert "reconcile now" in out, "the operator clicked"
    assert "result                                PASS" in out


def test_the_sandbox_key_mode_is_refused_with_rt(capsys):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="RT never honours keys"):
        call_command("killtest", "--channel", "rt", "--sandbox-keys", "ignore")
