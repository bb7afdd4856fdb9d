import datetime as dt

from django.db import connection

from ledger.channels.base import CallResult, Channel
from ledger.clock import db_now
from ledger.models import Effect
from tests.gate_run import effect_run

NOTIFY = {"ticket": "T-1", "body": {"to": "ann@example.com", "subject": "Re: refund", "body": "Your refund is on its way."}}


def run_notify(payload=None, *, claim_token="worker-a", item="i1", action="notify_customer", step="notify_customer",
               channel=None):
    return effect_run(action=action, payload=payload or NOTIFY, owner_task="t1", owner_item=item,
                      owner_step=step, claim_token=claim_token, channel=channel)


def settled(effect_id: int) -> int:
    """The effect's settle time moved into the past, as if the test had waited it out: from now on a
    look-up's "not found" about it is trusted (`ledger.services.reconcile_not_before`). Returns the id."""
    Effect.objects.filter(pk=effect_id).update(settle_after=db_now() - dt.timedelta(milliseconds=1))
    return effect_id


class Answers(Channel):
    """A helpdesk channel that answers `result` (after running `before`, e.g. a take-over during the call)."""

    name = "helpdesk"

    def __init__(self, result: CallResult, before=None):
        self.result, self.before = result, before

    def perform(self, spec, payload, key, deadline):
        if self.before is not None:
            self.before()
        return self.result


class Statements:
    """The statements run (their first word), and whether each ran inside a transaction block."""

    def __init__(self):
        self.seen = []

    def __call__(self, execute, sql, params, many, context):
        self.seen.append((sql.split()[0], connection.in_atomic_block))
        return execute(sql, params, many, context)
