"""Search answers every query with a page: tickets by id or customer email, tasks by name or number."""

import pytest
from django.urls import reverse

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
