"""The sweep's holder keeps the sweep through a pass that waits on the helpdesk longer than a lease.

The server ends a silent sweep session after a lease (`idle_session_timeout`: a paused holder is taken over). A
look-up sends its request with no transaction open, so a helpdesk that answers it in more than a lease must not
make the session that holds the lock look silent: otherwise the server ends it in the middle of every such look-up,
its answer is lost with the session, and the effect stays unknown for as long as the helpdesk stays slow.
"""

import datetime as dt
import logging
import threading

import pytest
from django.utils import timezone

from ledger.models import Effect, EffectState
from ops.faultproxy import FaultProxy
from ticketagent.scheduling.sweep import sweep_while_held

from ..conftest import wait_for
from ..ledger.helpers import run_notify

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP_SECONDS = 2.5  # each look-up's answer is held this long: more than two leases


def test_a_look_up_slower_than_a_lease_is_recorded_and_the_sweep_stays_with_its_holder(sandbox, settings, caplog):
    sandbox.set_faults(error_next={"notify": 1}, error_status=503)
    effect = run_notify().effect
    assert (effect.state, effect.answered) == (EffectState.UNKNOWN, False)
    Effect.objects.filter(pk=effect.pk).update(settle_after=timezone.now() - dt.timedelta(seconds=1))  # ask at once

    proxy = FaultProxy("127.0.0.1", int(sandbox.base_url.rsplit(":", 1)[1]))
    proxy.start()
    for _ in range(20):  # every look-up of the test, not only the first
        proxy.stall_next(b"GET /api/lookup/", LOOKUP_SECONDS)
    settings.HELPDESK_URL = f"http://127.0.0.1:{proxy.port}"
    settings.HELPDESK_READ_TIMEOUT = LOOKUP_SECONDS + 5
    settings.LEASE_SECONDS = 1  # the holder's session is ended after 1 s of silence

    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="ticketagent.scheduling.sweep")
    sweeper = threading.Thread(target=sweep_while_held, args=(stop,), kwargs={"interval": 0.2}, daemon=True)
    sweeper.start()
    try:
        wait_for(lambda: Effect.objects.get(pk=effect.pk).state != EffectState.UNKNOWN, timeout=30,
                 message=lambda: f"the effect resolved by the sweep\n{caplog.text}")
    finally:
        stop.set()
        sweeper.join(timeout=30)
        proxy.close()
    effect.refresh_from_db()
    assert (effect.state, effect.verdict) == (EffectState.FAILED, "not_happened")  # the 503 wrote nothing
    assert proxy.counts["aimed stall"] >= 1, f"the look-up went through the proxy, held: {proxy.events}"
    sweeps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sweep:")]
    assert sweeps == ["sweep: this process sweeps now"], f"the holder kept the sweep throughout: {sweeps}"
    assert not sweeper.is_alive()
