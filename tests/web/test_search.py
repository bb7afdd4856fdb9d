"""Search answers every query with a page: tickets by any part of their id, customer email or subject, tasks by
name or number; the page says what it searched."""

import re

import pytest
from django.db import connection
from django.urls import reverse

from ticketagent.models import Item

from ..factories import make_task

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.mark.parametrize("query", ["", "   ", "\x00T-1", "²", "99999999999999999999999", "#", "%", "_", "'; --",
                                   "<script>", "x" * 5000])
def test_any_query_gets_a_page(client, bob, query):
    make_task(1)
    client.force_login(bob)
    response = client.get(reverse("search"), {"q": query})
    assert response.status_code == 200
    assert b"<script>" not in response.content.split(b"</header>", 1)[1]


def test_tickets_by_id_and_email_across_tasks_and_tasks_by_name_or_number(client, bob):
    first, second = make_task(2, name="Monday"), make_task(2, name="Tuesday")
    client.force_login(bob)
    html = client.get(reverse("search"), {"q": "T-2"}).content.decode()
    assert all(f'id="result-item-{t.items.get(ticket_id="T-2").pk}"' in html for t in (first, second))
    html = client.get(reverse("search"), {"q": "CUST1@EXAMPLE.COM"}).content.decode()
    assert html.count('id="result-item-') == 2
    html = client.get(reverse("search"), {"q": "tues"}).content.decode()
    assert f'id="result-task-{second.pk}"' in html and f'id="result-task-{first.pk}"' not in html
    html = client.get(reverse("search"), {"q": f"#{first.pk}"}).content.decode()
    assert f'id="result-task-{first.pk}"' in html


def test_tickets_by_any_part_of_their_id_email_domain_or_subject_exact_first_and_the_page_says_what_it_searched(
        client, bob):
    """Before: "example.com" found nothing (only whole ids and emails were looked up) and nothing said why."""
    task = make_task(3, name="Wednesday")
    first, second, third = task.items.order_by("row")
    Item.objects.filter(pk=first.pk).update(customer_email="ana@shop.example.org", subject="Refund for order 1182")
    Item.objects.filter(pk=second.pk).update(customer_email="ben@example.com", subject="Where is my parcel?")
    Item.objects.filter(pk=third.pk).update(ticket_id="T-31", customer_email="cy@other.net", subject="Login fails")
    client.force_login(bob)

    def found(query):
        html = client.get(reverse("search"), {"q": query}).content.decode()
        return re.findall(r'id="result-item-(\d+)"', html), html

    assert found("example.com")[0] == [str(second.pk)]  # a domain
    assert set(found("EXAMPLE.")[0]) == {str(first.pk), str(second.pk)}  # any part, ignoring case
    assert found("@shop")[0] == [str(first.pk)]
    assert found("refund for ORDER")[0] == [str(first.pk)]  # part of a subject
    assert found("parcel")[0] == [str(second.pk)]
    assert found("T-3")[0][0] == str(third.pk)  # part of a ticket id, "T-3" exactly first if it exists
    assert found("t-31")[0] == [str(third.pk)]
    ids, html = found("100%_sure")  # LIKE's wildcards are searched for as they are
    assert ids == [] and "No ticket’s id, customer email or subject contains “100%_sure”" in html.replace("'", "’")
    assert "Searched: every task’s tickets by any part of their ticket id, customer email" in html.replace("'", "’")


def test_an_exact_ticket_id_comes_before_the_ids_that_contain_it(client, bob):
    task = make_task(12, name="Many")
    client.force_login(bob)
    html = client.get(reverse("search"), {"q": "T-1"}).content.decode()
    ids = re.findall(r'id="result-item-(\d+)"', html)
    assert ids[0] == str(task.items.get(ticket_id="T-1").pk)
    assert {str(i.pk) for i in task.items.filter(ticket_id__in=["T-10", "T-11", "T-12"])} <= set(ids)


def test_the_trigram_indexes_exist(db):
    """pg_trgm is created by the migration (trusted since PostgreSQL 13) and each searched column has its index."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'item_%%_trgm_idx' ORDER BY 1")
        assert [r[0] for r in cursor.fetchall()] == ["item_email_trgm_idx", "item_subject_trgm_idx",
                                                     "item_ticket_trgm_idx"]
