"""The heartbeat round (`lease.leases_renew`): it extends the leases still ours, does not wait for an item whose
row another session holds locked (its own phase, a take-over, a cut-off session) -- that lease is neither renewed
nor lost this round -- and marks lost the leases that are no longer ours."""

import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.lease import HEARTBEATS, Lease, LeaseLost, leases_renew

from ..conftest import wait_for
from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def other_session():
    params = connection.get_connection_params()
    return psycopg.connect(**{k: v for k, v in params.items() if k not in ("cursor_factory", "context")})


def test_a_round_renews_ours_skips_the_locked_and_loses_the_taken():
    task = make_task(3)
    free, locked, taken = task.items.order_by("pk")
    for item, token in ((free, "free"), (locked, "locked"), (taken, "taken")):
        Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_token=token)
    Item.objects.filter(pk=taken.pk).update(lease_token="someone-else")
    leases = [Lease(item.pk, token, confirmed_at=0.0) for item, token in
              ((free, "free"), (locked, "locked"), (taken, "taken"))]
    with other_session() as other:  # holds the row of `locked`, as its phase would
        other.execute('SELECT 1 FROM "ticketagent_item" WHERE id = %s FOR NO KEY UPDATE', [locked.pk])
        with connection.cursor() as cursor:  # a round that waited for the lock would fail, not hang
            cursor.execute("SET lock_timeout = '2s'")
        before = time.monotonic()
        leases_renew(leases)
    renewed, skipped, lost = leases
    assert renewed.confirmed_at >= before and not renewed.lost
    assert skipped.confirmed_at == 0.0 and not skipped.lost
    assert lost.lost
    expires = dict(Item.objects.filter(task=task).values_list("pk", "lease_expires_at"))
    assert expires[free.pk] is not None and expires[locked.pk] is None and expires[taken.pk] is None


def terminate_other_sessions() -> int:
    """End every session of this database but the test's own (the heartbeat thread's among them): a database
    blip, as a restart or a failover is to a session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.fixture
def running():
    """An item running under lease "tok"."""
    item = make_task(1).items.get()
    Item.objects.filter(pk=item.pk).update(status=ItemStatus.RUNNING, lease_token="tok")
    return item


class TestALeaseInDoubt:
    """A heartbeat round that failed puts every lease of the process in doubt (no call on the strength of an
    old confirmation); a renewal that succeeds later clears the doubt of the leases it renewed, so one blip of
    the database does not hand back every item in flight. A lease no longer ours is still lost."""

    def test_is_cleared_by_the_next_round_that_renews_it(self, running, caplog):
        lease = Lease(running.pk, "tok", confirmed_at=time.monotonic())
        HEARTBEATS.add(lease)
        try:
            wait_for(lambda: Item.objects.get(pk=running.pk).lease_expires_at is not None, timeout=30,
                     message="a first round to renew the lease")
            assert terminate_other_sessions() >= 1  # the heartbeat thread's session: its next round fails
            wait_for(lambda: any(r.getMessage().startswith("lease heartbeat for 1 item(s) failed")
                                 for r in caplog.records), timeout=30, message="a round to fail")
            after_failure = lease.confirmed_at
            wait_for(lambda: lease.confirmed_at > after_failure, timeout=30, message="a later round to renew")
            assert not lease.in_doubt and not lease.lost
            assert lease.ensure(0.5) > time.monotonic(), "the next call may go ahead"
        finally:
            HEARTBEATS.discard(lease)

    def test_is_confirmed_by_the_worker_before_its_call(self, running):
        lease = Lease(running.pk, "tok", confirmed_at=time.monotonic())
        lease.doubt("a heartbeat failed (OperationalError)")
        before = time.monotonic()
        deadline = lease.ensure(0.5)  # renewed first, in one round trip, instead of handing the item back
        assert lease.confirmed_at >= before and not lease.in_doubt
        assert deadline == lease.valid_until() - settings.LEASE_MARGIN_SECONDS
        assert Item.objects.get(pk=running.pk).lease_expires_at is not None

    def test_that_was_taken_over_makes_no_call(self, running):
        lease = Lease(running.pk, "tok", confirmed_at=time.monotonic())
        lease.doubt("a heartbeat failed (OperationalError)")
        Item.objects.filter(pk=running.pk).update(lease_token="someone-else")
        with pytest.raises(LeaseLost) as raised:
            lease.ensure(0.5)
        assert type(raised.value) is LeaseLost and lease.lost
