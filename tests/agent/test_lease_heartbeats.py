"""The heartbeat round (`lease.leases_renew`): it extends the leases still ours, does not wait for an item whose
row another session holds locked (its own phase, a take-over, a cut-off session) -- that lease is neither renewed
nor lost this round -- and marks lost the leases that are no longer ours."""

import time

import psycopg
import pytest
from django.db import connection

from ticketagent.models import Item, ItemStatus
from ticketagent.pipeline.lease import Lease, leases_renew

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
