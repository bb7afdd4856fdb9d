"""Every page, with tasks, items and effects in every state their models know, speaks people's words and counts
with the right plural.

Before: "items by state" listed `waiting_approval` and `waiting_review` beside "waiting for approval" elsewhere,
the effects' states and the timeline printed raw values, and the tiles said "1 unknown effects", "1 resumes".
The rows are made in every state of `TaskStatus`, `ItemStatus` and `EffectState` (effects written as rows: only
their rendering is under test), once with one of a kind and once with two, and each page's text -- what is shown
and what is read out (titles, labels) -- is searched for a raw state value and for a count with the wrong plural.
"""

import hashlib
import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger.models import Effect, EffectClass, EffectState, EffectTransition, Verdict
from ticketagent.llm.schemas import SCHEMA_VERSION
from ticketagent.models import Checkpoint, Event, EventType, Item, ItemStatus, Task, TaskStatus
from ticketagent.plan import PLAN_VERSION, STEP_NAMES

from ..factories import make_task

pytestmark = pytest.mark.django_db

RAW = sorted({v for enum in (TaskStatus, ItemStatus, EffectState) for v in enum.values if "_" in v}
             | {Verdict.NOT_HAPPENED.value} | {v for v in EventType.values if "_" in v})
NOUNS = ("item", "effect", "task", "approval", "attempt", "token", "call", "resume", "recovery", "duplicate",
         "failure", "ticket", "step")
ADJECTIVES = r"(?:unknown |failed |suspended |blocked |held |consecutive |model |queued |running |waiting )?"
ONE_PLURAL = re.compile(r"(?<![\w.,-])\b1 " + ADJECTIVES + r"(" + "|".join(
    n[:-1] + "ies" if n.endswith("y") else n + "s" for n in NOUNS) + r")\b")
MANY_SINGULAR = re.compile(r"(?<![\w.,-])\b(?:0|[2-9]|[1-9][\d,]+) " + ADJECTIVES + r"(" + "|".join(NOUNS)
                           + r")\b(?![-'’])")
SAID_TWICE = re.compile(r"(?<![\w-])([a-z_]{3,}) · \1\b")  # "save_draft · save_draft" in an item's history
RAW_WORD = re.compile(r"\b(" + "|".join(RAW) + r")\b")


class _Text(HTMLParser):
    """What a person reads or hears: the text outside scripts and styles, and titles, labels and placeholders."""

    def __init__(self):
        super().__init__()
        self.parts, self._skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        for name, value in attrs:
            if name in ("title", "aria-label", "placeholder", "alt") and value:
                self.parts.append(value)

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def readable(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return re.sub(r"\s+", " ", " ".join(parser.parts))


def _effect(item, state, n):
    key = hashlib.sha256(f"{item.pk}-{state}-{n}".encode()).hexdigest()
    effect = Effect.objects.create(
        idempotency_key=key, action="save_draft", effect_class=EffectClass.OVERWRITE, channel="helpdesk",
        state=state, owner_task=str(item.task_id), owner_item=str(item.pk), owner_step="save_draft",
        payload={"ticket": item.ticket_id}, payload_hash=key, intent_at=timezone.now(),
        verdict=Verdict.NOT_HAPPENED if state == EffectState.FAILED else "")
    EffectTransition.objects.create(effect=effect, from_state=EffectState.UNKNOWN, to_state=state,
                                    event="EFFECT_COMMITTED", at=timezone.now())
    return effect


def _world(per_kind: int) -> dict:
    """A task in every status; in the running one, `per_kind` items in every item status, each with an effect in
    every effect state, a checkpoint with a decision, and events that carry a state."""
    tasks = {}
    for index, status in enumerate(TaskStatus.values):
        task = make_task(len(ItemStatus.values) * per_kind, name=f"Batch {index}", prefix=f"T{index}")
        Task.objects.filter(pk=task.pk).update(status=status, started_at=timezone.now(), status_reason="a reason")
        tasks[status] = task
    rehearsal = make_task(len(ItemStatus.values) * per_kind, name="Rehearsal", prefix="RH", rehearsal=True)
    Task.objects.filter(pk=rehearsal.pk).update(status=TaskStatus.RUNNING, started_at=timezone.now())
    items = _in_every_state(tasks[TaskStatus.RUNNING], per_kind)
    _in_every_state(rehearsal, per_kind)
    return {"tasks": tasks, "items": items, "rehearsal": rehearsal}


def _in_every_state(task, per_kind: int) -> list[Item]:
    items = list(task.items.order_by("row"))
    for index, item in enumerate(items):
        status = ItemStatus.values[index // per_kind]
        Item.objects.filter(pk=item.pk).update(status=status, last_error="an error",
                                               finished_at=timezone.now())
        Checkpoint.objects.create(
            item=item, task=item.task, plan_version=PLAN_VERSION, playbook_version_id=item.playbook_version_id,
            schema_version=SCHEMA_VERSION, cursor=STEP_NAMES.index("save_draft"), input_hash=item.input_hash(),
            step_outputs={"triage": {"category": "billing", "priority": "normal", "sentiment": "neutral",
                                     "language": "en", "summary": "a question"},
                          "draft": {"subject": "Re", "body": "An answer.", "articles": []},
                          "decide": {"actions": ["save_draft", "close_ticket"], "chosen": ["save_draft"],
                                     "reason": "answer it", "rules": [], "checks": [], "held": {}}})
        for state in EffectState.values:
            for n in range(per_kind):
                _effect(item, state, n)
        for state in (*ItemStatus.values, *EffectState.values):
            Event.objects.create(task=item.task, item=item, type=EventType.TASK_STATUS,
                                 payload={"state": state, "step": "save_draft", "action": "save_draft"})
    return items


def _pages(world) -> dict[str, str]:
    pages = {"tasks": reverse("tasks"), "review": reverse("review"), "search": "/search/?q=T1"}
    for status, task in world["tasks"].items():
        pages[f"task {status}"] = reverse("task-detail", args=[task.pk])
        pages[f"dry-run {status}"] = reverse("task-dry-run", args=[task.pk])
    for f in ("running", "suspended", "needs_review", "done"):
        pages[f"tasks {f}"] = f"{reverse('tasks')}?status={f}"
    for item in world["items"]:
        pages[f"item {item.pk}"] = reverse("item-detail", args=[item.pk])
    pages["rehearsal"] = reverse("rehearsal", args=[world["rehearsal"].pk])
    pages["task rehearsal"] = reverse("task-detail", args=[world["rehearsal"].pk])
    return pages


@pytest.mark.parametrize("per_kind", [1, 2])
def test_no_page_shows_a_raw_state_or_a_wrong_plural(client, alice, per_kind):
    world = _world(per_kind)
    client.force_login(alice)
    found = []
    for name, url in _pages(world).items():
        response = client.get(url)
        assert response.status_code == 200, (name, url, response.status_code)
        text = readable(response.content.decode())
        for pattern in (RAW_WORD, ONE_PLURAL, MANY_SINGULAR, SAID_TWICE):
            found += [(name.split(" ")[0], text[max(m.start() - 30, 0):m.end() + 20]) for m in pattern.finditer(text)]
    assert not found, "\n".join(sorted({f"{page}: …{context}…" for page, context in found}))


def test_the_checker_finds_what_it_looks_for():
    text = readable('<p title="3 item waiting_review">ITEM_WAITING 1 unknown effects · 2 item · 1 resumes · save_draft · save_draft'
                    '</p><script>x_y</script>')
    assert SAID_TWICE.findall(text) == ["save_draft"]
    assert RAW_WORD.findall(text) == ["waiting_review", "ITEM_WAITING"]
    assert [m.group(0) for m in ONE_PLURAL.finditer(text)] == ["1 unknown effects", "1 resumes"]
    assert [m.group(0) for m in MANY_SINGULAR.finditer(text)] == ["3 item", "2 item"]
