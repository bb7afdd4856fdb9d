"""An effect with a step after it records its outcome in one statement (PostgreSQL): the
outcome with its transition, the step's recovery point with its events, and
the next effect's intent (chained) -- on the condition of the lease, in
autocommit. A task stopped meanwhile gets the item back and no next intent;
a next intent a unique index refuses is left to its own step, which blocks
it as always."""

import pytest
from django.db import connection, transaction

from ledger.gate import effect_prepare, intent_record
from ledger.models import BlockedDuplicate, Effect, EffectState
from ticketagent.llm.offline import OfflineModel
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.pipeline.run import item_process
from ticketagent.plan import STEP_NAMES, effect_action

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def folded(sql: str) -> bool:
    return sql.startswith("WITH f AS MATERIALIZED") and "cp AS (UPDATE" in sql


class Watch:
    """The statements run (and whether inside a transaction block); `before_fold` runs once before the first
    folded outcome."""

    def __init__(self, before_fold=None):
        self.seen, self.before_fold, self.busy = [], before_fold, False

    def __call__(self, execute, sql, params, many, context):
        if not self.busy:
            self.seen.append((sql, connection.in_atomic_block))
            if self.before_fold is not None and folded(sql):
                self.busy, before, self.before_fold = True, self.before_fold, None
                try:
                    before()
                finally:
                    self.busy = False
        return execute(sql, params, many, context)


def run(item: Item, watch: Watch) -> str:
    item.refresh_from_db()
    with connection.execute_wrapper(watch):
        return item_process(item_id=item.pk, attempt=item.attempt, model=OfflineModel())


class TestAFoldedOutcome:
    def test_writes_the_outcome_the_step_and_the_next_intent_in_one_statement(self, sandbox, queue):
        item = make_task(1).items.get()
        watch = Watch()
        assert run(item, watch) == "done"
        effects = Effect.objects.filter(owner_item=item.ref).order_by("id")
        chosen = ["save_draft", "notify_customer", "set_status", "escalate"]  # a billing complaint is escalated
        assert list(effects.values_list("owner_step", "state")) == [(step, EffectState.COMMITTED) for step in chosen]
        # every effect but the last has a step after it; the last ends the item (in a transaction of its own)
        folds = [(sql, atomic) for sql, atomic in watch.seen if folded(sql)]
        assert [atomic for _, atomic in folds] == [False] * (len(chosen) - 1)
        assert all("ni AS (INSERT INTO" in sql for sql, _ in folds)
        for effect in effects:
            assert list(effect.transitions.order_by("id").values_list("event", flat=True)) == [
                "EFFECT_INTENT", "EFFECT_COMMITTED"]
        steps = list(Event.objects.filter(item=item, type=EventType.STEP_DONE).order_by("id")
                     .values_list("payload__step", flat=True))
        assert steps == ["triage", "draft", "decide", *chosen]
        checkpoint = Checkpoint.objects.get(item=item)
        assert checkpoint.step_outputs["notify_customer"]["effect_id"] == effects[1].pk
        assert sandbox.counts()["duplicates"] == 0

    def test_of_a_task_paused_meanwhile_hands_the_item_back_without_the_next_intent(self, sandbox, queue):
        item = make_task(1).items.get()

        def pause():
            Task.objects.filter(pk=item.task_id).update(status=TaskStatus.PAUSED)

        assert run(item, Watch(before_fold=pause)) == "task stopped after save_draft"
        item.refresh_from_db()
        assert (item.status, item.lease_token) == (ItemStatus.QUEUED, "")
        assert Checkpoint.objects.get(item=item).cursor == STEP_NAMES.index("save_draft") + 1
        assert list(Effect.objects.filter(owner_item=item.ref).values_list("owner_step", "state")) == [
            ("save_draft", EffectState.COMMITTED)]
        assert Event.objects.filter(item=item, type=EventType.ITEM_STOPPED).count() == 1

    def test_whose_next_intent_is_refused_leaves_it_to_its_step_which_blocks_it(self, sandbox, queue):
        item = make_task(1).items.get()
        task = item.task

        def slot_taken():  # another payload already holds notify_customer's slot
            other = effect_prepare(action=effect_action("notify_customer", notify_channel=task.notify_channel),
                                   payload={"ticket": item.ticket_id, "body": {"to": "x@example.com", "body": "old"}},
                                   owner_task=str(task.pk), owner_item=item.ref, owner_step="notify_customer",
                                   lease_token="earlier")
            with transaction.atomic():
                effect, _ = intent_record(other)
            Effect.objects.filter(pk=effect.pk).update(state=EffectState.COMMITTED)

        assert run(item, Watch(before_fold=slot_taken)) == "done"
        blocked = BlockedDuplicate.objects.get()
        assert (blocked.kind, blocked.owner_step) == (BlockedDuplicate.Kind.CONFLICT, "notify_customer")
        assert sandbox.counts()["by_endpoint"].get("notify", 0) == 0
        assert Effect.objects.filter(owner_item=item.ref, owner_step="notify_customer").count() == 1
