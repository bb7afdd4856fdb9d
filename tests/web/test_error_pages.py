"""A page that does not exist and a page that fails are the product's own pages, with DEBUG off (production) and
with DEBUG on (`make run`).

Before: with DEBUG on (make run's default) an unknown address showed Django's debug page, every URL pattern of the
site in a 466 px wide table, and a failing view its traceback."""

import pytest
from django.test import Client
from django.urls import reverse

from ticketagent.web.selectors import ops as selectors_ops

from ..factories import make_task

pytestmark = [pytest.mark.django_db]


@pytest.fixture(params=[False, True], ids=["DEBUG off", "DEBUG on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def _broken_search(query):
    raise RuntimeError("the search broke")


def test_an_unknown_address_is_the_products_not_found_page(debug, client, bob):
    client.force_login(bob)
    for url in ("/no-such-page/", "/tasks/999999/", "/items/999999/", "/static/nothing.css"):
        response = client.get(url)
        assert response.status_code == 404, url
        html = response.content.decode()
        assert '<h1 id="not-found-h">Not found</h1>' in html, url
        assert "There is no page at <code>" in html and 'id="nav-workers"' in html  # the product's header
        assert "URLconf" not in html and "technical" not in html and "Traceback" not in html


def test_an_unknown_address_is_not_found_signed_out_too(debug, client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and "There is no page at" in response.content.decode()


def test_a_missing_slash_is_still_redirected_first(debug, client, bob):
    client.force_login(bob)
    assert client.get("/workers").status_code == 301


def test_a_failing_page_is_the_products_server_error_page(debug, bob, monkeypatch, caplog):
    monkeypatch.setattr(selectors_ops, "search", _broken_search)
    client = Client(raise_request_exception=False)
    client.force_login(bob)
    make_task(1)
    response = client.get(reverse("search"), {"q": "T-1"})
    assert response.status_code == 500
    html = response.content.decode()
    assert '<h1 id="server-error-h">Server error</h1>' in html
    assert "the search broke" not in html and "Traceback" not in html  # the traceback is in the log only
    assert any(r.exc_info and "the search broke" in str(r.exc_info[1]) for r in caplog.records)


def test_a_forbidden_action_is_still_the_products_403(debug, client, bob):
    client.force_login(bob)  # a viewer
    response = client.post(reverse("task-pause", args=[make_task(1).pk]))
    assert response.status_code == 403 and 'id="denied"' in response.content.decode()
