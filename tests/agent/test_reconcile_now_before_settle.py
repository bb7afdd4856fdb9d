""""Reconcile now" clicked while a gateway's 504 may still land cannot make a reply go out twice.

A reply goes to the helpdesk behind a gateway (ops/gateway.py) that answers
504 after 1 s and hands the request to the helpdesk seconds later, as nginx
does in front of a slow upstream. The helpdesk ignores idempotency keys, as
most do: only the ledger stands between a retry and a second reply. The
worker records the effect `unknown` with a settle time (the 504 + the
gateway's upstream timeout + 2 s). An operator clicks "Reconcile now" on the
review page at once; the look-up does not see the key yet.

Before: the click skipped the settle time, "not found" became "did not
happen", the item retried with the same key, its own look-up found nothing
either, and it wrote again; then the gateway's write landed: two replies.
Now: the effect stays unknown (the look-up's answer is kept as evidence), the
late write lands, the recovery sweep's look-up after the settle time finds it,
and the item finishes with one reply.
"""

import pytest
from django.urls import reverse

from ledger.models import Effect, EffectState
from ops.gateway import Gateway
from ticketagent.models import Item, ItemStatus

from ..conftest import wait_for
from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HTMX = {"HX-Request": "true"}
DELIVER_AFTER = 6.0  # the gateway hands the write to the helpdesk this long after its 504
UPSTREAM_TIMEOUT = 12  # the gateway's upstream timeout the workers are told of: past DELIVER_AFTER, as in production


def test_reconcile_now_before_the_settle_time_leaves_a_504_unknown_and_one_reply_lands(workers, sandbox, client,
                                                                                       alice):
    sandbox.set_faults(honor_keys=False)
    gateway = Gateway(sandbox.base_url, write_share=1.0, paths=("/notify",), answer_after=1.0,
                      deliver_after=DELIVER_AFTER)
    helpdesk = gateway.start()
    try:
        workers.procs.env.update(HELPDESK_URL=helpdesk, HELPDESK_UPSTREAM_TIMEOUT=str(UPSTREAM_TIMEOUT))
        task = make_task(1)
        workers.start(1)
        effect = wait_for(lambda: Effect.objects.filter(owner_task=str(task.pk), action="notify_customer",
                                                        state=EffectState.UNKNOWN).first(),
                          timeout=90, message="the reply to be unknown after the gateway's 504")
        gateway.write_share = 0.0  # the 504 came; any later write passes straight through
        assert gateway.counts["504"] == 1 and "answered 504" in effect.last_error, effect.last_error
        assert sandbox.deliveries(key=effect.idempotency_key) == [], "the helpdesk is still being written to"

        client.force_login(alice)
        answer = client.post(reverse("effect-reconcile", args=[effect.pk]), headers=HTMX)
        assert answer.status_code == 200
        assert gateway.counts["delivered late"] == 0, "the look-up was asked before the write landed"
        effect.refresh_from_db()
        after_click, evidence, row = effect.state, effect.last_reconcile, answer.content.decode()

        workers.start_recovery()  # its look-up, once the settle time has passed, finds the late write
        item = Item.objects.get(pk=int(effect.owner_item))
        wait_for(lambda: Item.objects.get(pk=item.pk).status == ItemStatus.DONE, timeout=120,
                 message=lambda: f"the item to finish\n{workers.logs()}")
    finally:
        gateway.close()  # lets a late write still pending land first
    deliveries = sandbox.deliveries(key=effect.idempotency_key)
    assert len(deliveries) == 1, f"{len(deliveries)} replies reached the customer: {deliveries}"
    assert sandbox.counts()["by_endpoint"]["notify"] == 1
    assert after_click == EffectState.UNKNOWN, "a look-up before the settle time decided 'did not happen'"
    assert evidence.startswith("the helpdesk has no record of this key — asked before its settle time, so not "
                               "trusted"), evidence  # the look-up's answer, kept as evidence
    assert "can be checked from" in row and "a request that got a 5xx or no answer may still land" in row, row
    effect.refresh_from_db()
    assert (effect.state, effect.resolved_by, effect.attempts) == (EffectState.COMMITTED, "reconcile", 1)
