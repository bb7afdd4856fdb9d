"""One effect step is "phase → call → phase": the pipeline crosses into the ledger once per phase
(`intent_record`, `effect_perform`, `outcome_record`, each once an effect, in that order, before the next
effect's), the call with no transaction open; the outcome's phase carries the step's recovery point, and
no intent of another effect. A task paused during a call gets the item back without the next intent; a
next intent whose slot is taken meanwhile is blocked as a conflict, nothing sent."""

import time

import psycopg
import pytest
from django.db import connection, transaction

from ledger import gate
from ledger.models import BlockedDuplicate, Effect, EffectState
from ticketagent.llm.offline import OfflineModel
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline import steps
from ticketagent.pipeline.run import item_process
from ticketagent.plan import STEP_NAMES, effect_action

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CHOSEN = ["save_draft", "notify_customer", "set_status", "escalate"]  # a billing complaint is escalated


class Crossings:
    """Every call the pipeline makes into the gate: (name, the effect's step, a transaction open?), and the
    transactions they ran in (`txids`: name and step by PostgreSQL's transaction id)."""

    def __init__(self, monkeypatch, after_perform=None):
        self.seen, self.txids, self.after_perform = [], {}, after_perform
        for module, name in ((steps, "intent_record"), (steps, "effect_perform"), (steps, "outcome_record")):
            monkeypatch.setattr(module, name, self._wrap(name, getattr(gate, name)))

    def _wrap(self, name, real):
        def call(intent, *args, **kwargs):
            self.seen.append((name, intent.owner_step, connection.in_atomic_block))
            if connection.in_atomic_block:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT txid_current()")
                    self.txids.setdefault(cursor.fetchone()[0], []).append((name, intent.owner_step))
            answer = real(intent, *args, **kwargs)
            if name == "effect_perform" and self.after_perform is not None:
                self.after_perform(intent.owner_step)
            return answer

        return call


def run(item: Item) -> str:
    item.refresh_from_db()
    return item_process(item_id=item.pk, attempt=item.attempt, model=OfflineModel())


class TestAnEffectStep:
    def test_crosses_into_the_ledger_once_per_phase(self, sandbox, queue, monkeypatch):
        item = make_task(1).items.get()
        crossings = Crossings(monkeypatch)
        assert run(item) == "done"
        assert [(name, owner, atomic) for name, owner, atomic in crossings.seen] == [
            crossing for step in CHOSEN for crossing in (
                ("intent_record", step, True), ("effect_perform", step, False), ("outcome_record", step, True))]
        assert [len(calls) for calls in crossings.txids.values()] == [1] * 2 * len(CHOSEN), \
            "each intent and each outcome is recorded in a phase of its own: no intent rides an earlier phase"
        effects = Effect.objects.filter(owner_item=item.ref).order_by("id")
        assert list(effects.values_list("owner_step", "state")) == [(step, EffectState.COMMITTED) for step in CHOSEN]
        for effect in effects:
            assert list(effect.transitions.order_by("id").values_list("event", flat=True)) == [
                "EFFECT_INTENT", "EFFECT_COMMITTED"]
        steps_done = list(Event.objects.filter(item=item, type=EventType.STEP_DONE).order_by("id")
                          .values_list("payload__step", flat=True))
        assert steps_done == ["triage", "draft", "decide", *CHOSEN]
        assert Checkpoint.objects.get(item=item).step_outputs["notify_customer"]["effect_id"] == effects[1].pk
        assert sandbox.counts()["duplicates"] == 0

    def test_of_a_task_paused_during_the_call_hands_the_item_back_without_the_next_intent(self, sandbox, queue,
                                                                                         monkeypatch):
        item = make_task(1).items.get()

        def pause(step):
            if step == "save_draft":
                Task.objects.filter(pk=item.task_id).update(status=TaskStatus.PAUSED)

        Crossings(monkeypatch, after_perform=pause)
        assert run(item) == "task stopped at save_draft"
        item.refresh_from_db()
        assert (item.status, item.lease_token) == (ItemStatus.QUEUED, "")
        assert Checkpoint.objects.get(item=item).cursor == STEP_NAMES.index("save_draft") + 1
        assert list(Effect.objects.filter(owner_item=item.ref).values_list("owner_step", "state")) == [
            ("save_draft", EffectState.COMMITTED)]
        assert Event.objects.filter(item=item, type=EventType.ITEM_STOPPED).count() == 1

    def test_whose_next_intents_slot_was_taken_meanwhile_blocks_it_and_sends_nothing(self, sandbox, queue,
                                                                                     monkeypatch):
        item = make_task(1).items.get()
        task = item.task

        def slot_taken(step):  # another payload takes notify_customer's slot while save_draft is called
            if step != "save_draft":
                return
            other = gate.intent_prepare(
                action=effect_action("notify_customer", notify_channel=task.notify_channel),
                payload={"ticket": item.ticket_id, "body": {"to": "x@example.com", "body": "old"}},
                owner_task=str(task.pk), owner_item=item.ref, owner_step="notify_customer", claim_token="earlier")
            with transaction.atomic():
                effect = gate.intent_record(other).effect
            Effect.objects.filter(pk=effect.pk).update(state=EffectState.COMMITTED)

        Crossings(monkeypatch, after_perform=slot_taken)
        assert run(item) == "done"
        blocked = BlockedDuplicate.objects.get()
        assert (blocked.kind, blocked.owner_step) == (BlockedDuplicate.Kind.CONFLICT, "notify_customer")
        assert sandbox.counts()["by_endpoint"].get("notify", 0) == 0
        assert Effect.objects.filter(owner_item=item.ref, owner_step="notify_customer").count() == 1

    def test_whose_lease_was_lost_during_the_call_records_the_outcome_and_nothing_of_the_item(self, sandbox, queue,
                                                                                             monkeypatch):
        item = make_task(1).items.get()

        def lose_lease(step):  # the lease goes (not by a take-over: the effect row is still this attempt's)
            if step == "save_draft":
                Item.objects.filter(pk=item.pk).update(lease_token="someone-else")

        Crossings(monkeypatch, after_perform=lose_lease)
        assert run(item).startswith("stopped: ")
        effect = Effect.objects.get(owner_item=item.ref)
        assert (effect.owner_step, effect.state) == ("save_draft", EffectState.COMMITTED), "the outcome is the truth"
        assert Checkpoint.objects.get(item=item).cursor == STEP_NAMES.index("save_draft")
        assert not Event.objects.filter(item=item, type=EventType.STEP_DONE, payload__step="save_draft").exists()

    def test_whose_outcome_meets_a_lost_database_session_records_it_again(self, sandbox, queue, monkeypatch,
                                                                         caplog):
        """The worker's database session ends while notify_customer is called (a restart, a failover, a
        proxy's cut): the outcome, known in the worker's memory, is recorded by a retry within the lease
        (fenced by the claim token) -- not left for recovery to turn into an unknown."""
        item = make_task(1).items.get()
        ended = []

        def end_session(step):
            if step == "notify_customer" and not ended:
                ended.append(session_ended(connection))

        Crossings(monkeypatch, after_perform=end_session)
        assert run(item) == "done"
        assert ended == [True]
        assert [r.getMessage().split(": ", 1)[0] for r in caplog.records if "recorded again" in r.getMessage()] == [
            f"item {item.pk}"], "the first try met the ended session"
        effects = Effect.objects.filter(owner_item=item.ref).order_by("id")
        assert list(effects.values_list("owner_step", "state")) == [(step, EffectState.COMMITTED) for step in CHOSEN]
        notify = effects.get(owner_step="notify_customer")
        assert list(notify.transitions.values_list("event", flat=True)) == ["EFFECT_INTENT", "EFFECT_COMMITTED"]
        assert sandbox.counts()["by_endpoint"]["notify"] == 1
        assert Item.objects.get(pk=item.pk).status == ItemStatus.DONE


def session_ended(conn) -> bool:
    """End the database session of `conn` from another one, and wait until the server has ended it."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    params = conn.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k not in ("cursor_factory", "context")},
                         autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(300):
            if not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                return True
            time.sleep(0.1)
    return False
