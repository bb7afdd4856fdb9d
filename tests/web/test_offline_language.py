"""The offline model and the ticket's language: a short English ticket is recognised as English, and a ticket in a
language the offline model cannot write is held for a person, the item page saying why.

Before: the offline model tagged every ticket without a language column `und` (so a Russian ticket's English reply
passed the language check unheld and nothing on the page said the model could not write Russian)."""

import pytest
from django.urls import reverse

from ticketagent.models import Checkpoint, ItemStatus
from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.checks import language_detect

from ..factories import make_task

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("text", "language"), [
    ("Where is my order?", "en"), ("Password reset\nHello, I cannot log in.", "en"), ("Refund please", "en"),
    ("Где мой заказ?\nЗдравствуйте, я жду заказ уже две недели.", "ru"), ("Wo ist meine Bestellung?", "de"),
    ("Де моє замовлення? Її досі немає.", "uk"),
    # a reference's letters are no words: "8e0a76" once gave Portuguese its "e" and "a", and an English reply was held
    ("Question 1 (8e0a76)\nTracking for order 1 has not moved in a week.", "en"),
    ("Order A1E2 (ref 9a0e3a-e)\nWhere is my parcel? It has not arrived.", "en")])
def test_a_short_tickets_language(text, language):
    assert language_detect(text, min_words=1) == language


def test_a_reply_is_checked_on_clear_evidence_only():
    assert language_detect("Where is my order?") == ""  # four common words at least, for a reply


def test_a_russian_ticket_is_held_and_its_page_says_the_offline_model_cannot_write_russian(client, bob, queue,
                                                                                       sandbox):
    task = make_task(1, subject="Где мой заказ?", body="Здравствуйте! Я жду свой заказ уже две недели. Где он?")
    item = task.items.get()
    item_process(item_id=item.pk, attempt=item.attempt)
    item.refresh_from_db()
    outputs = Checkpoint.objects.get(item=item).step_outputs
    assert outputs["triage"]["language"] == "ru"
    assert [c["check"] for c in outputs["decide"]["checks"]] == ["wrong_language"]
    assert item.status == ItemStatus.WAITING_APPROVAL
    client.force_login(bob)
    html = client.get(reverse("item-detail", args=[item.pk])).content.decode()
    assert ('The offline model cannot write in the ticket\'s language (ru): this draft is in English. The reply '
            'checks hold it for a person, who writes the reply.') in html.replace("&#x27;", "'")


def test_a_short_english_ticket_is_english_and_its_page_says_nothing_of_languages(client, bob, queue, sandbox):
    task = make_task(1, subject="Where is my order?", body="Order 1042 has not arrived yet.")
    item = task.items.get()
    item_process(item_id=item.pk, attempt=item.attempt)
    assert Checkpoint.objects.get(item=item).step_outputs["triage"]["language"] == "en"
    client.force_login(bob)
    assert 'id="language-gap"' not in client.get(reverse("item-detail", args=[item.pk])).content.decode()
