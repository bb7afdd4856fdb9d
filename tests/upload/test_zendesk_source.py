"""Bringing tickets from Zendesk: a view or a search becomes upload rows, against the fake Zendesk."""

import json
import time

import pytest

from ticketagent.sources import SourceError
from ticketagent.sources.zendesk import fetch_tickets
from ticketagent.upload.parse import parse_batch


def seed(zd, n=3, **kwargs):
    return [zd.state.add_ticket(f"Order {i} is late", f"Hello, order {i} has not arrived.",
                                requester_email=f"c{i}@example.com", requester_name=f"Customer {i}",
                                locale="de-DE" if i == 0 else "en-US", tags=("shipping",), **kwargs)
            for i in range(n)]


def test_a_view_becomes_rows_page_by_page_with_requesters_looked_up(zd):
    tickets = seed(zd, 5)
    tickets[1]["priority"] = None
    view = zd.state.add_view("Open shipping", [t["id"] for t in tickets])
    zd.page_limit = 2
    rows = fetch_tickets(f"view:{view['id']}", limit=100)
    assert [r["ticket_id"] for r in rows] == [str(t["id"]) for t in tickets]
    first = rows[0]
    assert first == {
        "ticket_id": str(tickets[0]["id"]), "customer_email": "c0@example.com", "customer_name": "Customer 0",
        "subject": "Order 0 is late", "body": "Hello, order 0 has not arrived.", "priority": "normal",
        "language": "de-DE",
        "metadata": {"source": "zendesk", "zendesk_view": str(view["id"]), "zendesk_status": "open",
                     "zendesk_tags": ["shipping"], "zendesk_group_id": None},
    }
    assert rows[1]["priority"] == "normal", "no priority in Zendesk: the upload's default"
    assert len(zd.logged("view")) == 3, "5 tickets at 2 a page"
    [users] = zd.logged("users")
    assert sorted(users["query"]["ids"][0].split(",")) == sorted(str(t["requester_id"]) for t in tickets)


def test_the_rows_pass_the_upload_validation(zd):
    view = zd.state.add_view("All", [t["id"] for t in seed(zd, 3)])
    rows = fetch_tickets(f"view:{view['id']}", limit=10)
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    result = parse_batch(data, "from-zendesk.jsonl")
    assert result.errors == [] and len(result.rows) == 3
    assert result.rows[0].ticket_id == rows[0]["ticket_id"]


def test_a_view_stops_at_the_limit(zd):
    view = zd.state.add_view("Many", [t["id"] for t in seed(zd, 6)])
    zd.page_limit = 2
    rows = fetch_tickets(f"view:{view['id']}", limit=3)
    assert len(rows) == 3
    assert len(zd.logged("view")) == 2, "no page past the limit is read"
    assert zd.logged("view")[0]["query"]["page[size]"] == ["3"]


def test_a_search_adds_type_ticket_pages_by_offset_and_uses_side_loaded_requesters(zd):
    seed(zd, 4)
    zd.state.add_ticket("Password reset", "I cannot log in.", requester_email="d@example.com")
    zd.page_limit = 3
    rows = fetch_tickets("status:open late", limit=50)
    assert [r["subject"] for r in rows] == [f"Order {i} is late" for i in range(4)]
    searches = zd.logged("search")
    assert len(searches) == 2
    assert searches[0]["query"]["query"] == ["type:ticket status:open late"]
    assert searches[0]["query"]["include"] == ["tickets(users)"]
    assert zd.logged("users") == [], "the requesters came side-loaded"
    assert rows[0]["metadata"]["zendesk_search"] == "status:open late"


def test_a_search_limit_is_honoured_and_capped_at_zendesks_thousand(zd):
    seed(zd, 5)
    rows = fetch_tickets("type:ticket late", limit=2)
    assert len(rows) == 2
    assert zd.logged("search")[0]["query"]["per_page"] == ["2"]
    fetch_tickets("late", limit=5000)
    assert zd.logged("search")[-1]["query"]["per_page"] == ["100"]


def test_an_unknown_view_is_refused_clearly(zd):
    with pytest.raises(SourceError, match=r"Zendesk has no view 999999 \(HTTP 404\)"):
        fetch_tickets("view:999999", limit=10)


@pytest.mark.parametrize("query", ["view:abc", "view:", "view:12 34"])
def test_a_malformed_view_is_refused_without_a_request(zd, query):
    with pytest.raises(SourceError, match="not a view"):
        fetch_tickets(query, limit=10)
    assert zd.logged() == []


def test_a_bad_search_query_is_refused_with_zendesks_reason(zd):
    with pytest.raises(SourceError, match=r"refused .*HTTP 400.*Invalid search"):
        fetch_tickets('subject:"unbalanced', limit=10)


def test_a_search_for_something_other_than_tickets_is_refused(zd):
    with pytest.raises(SourceError, match="only tickets"):
        fetch_tickets("type:user ann", limit=10)
    assert zd.logged() == []


@pytest.mark.parametrize(("query", "limit", "message"), [("", 10, "empty"), ("   ", 10, "empty"),
                                                           ("late", 0, "at least 1")])
def test_an_empty_query_or_a_bad_limit_is_refused(zd, query, limit, message):
    with pytest.raises(SourceError, match=message):
        fetch_tickets(query, limit=limit)


def test_wrong_credentials_are_named_without_the_secret(zd, settings):
    settings.HELPDESK_TOKEN = "stale-token-31f0c9a2"
    with pytest.raises(SourceError) as caught:
        fetch_tickets("late", limit=10)
    message = str(caught.value)
    assert "HTTP 401" in message and "HELPDESK_TOKEN" in message and "stale-token-31f0c9a2" not in message


def test_missing_credentials_are_named_before_any_request(zd, settings):
    settings.HELPDESK_USER = ""
    with pytest.raises(SourceError, match="HELPDESK_USER .* and HELPDESK_TOKEN .* must both be set"):
        fetch_tickets("late", limit=10)
    assert zd.logged() == []


def test_an_unreachable_server_is_named(zd, settings):
    settings.HELPDESK_URL = "http://127.0.0.1:9"
    with pytest.raises(SourceError, match=r"could not connect.*HELPDESK_URL=http://127.0.0.1:9"):
        fetch_tickets("view:1", limit=10)


def test_a_server_that_does_not_answer_is_named(zd):
    zd.fail_next("search", "drop_before")
    with pytest.raises(SourceError, match="after sending"):
        fetch_tickets("late", limit=10)


def test_a_requester_without_email_refuses_the_whole_query_naming_the_ticket(zd):
    good = seed(zd, 1)[0]
    phone = zd.state.add_ticket("Call me back", "Please call.", requester_email=None, requester_name="Caller")
    view = zd.state.add_view("Mixed", [good["id"], phone["id"]])
    with pytest.raises(SourceError, match=rf"1 of the 2 .*ticket {phone['id']}: .*no email address"):
        fetch_tickets(f"view:{view['id']}", limit=10)


def test_a_short_rate_limit_is_waited_out_and_a_long_one_refused(zd):
    view = zd.state.add_view("One", [seed(zd, 1)[0]["id"]])
    zd.fail_next("view", "rate_limit", retry_after="1")
    started = time.monotonic()
    assert len(fetch_tickets(f"view:{view['id']}", limit=10)) == 1
    assert time.monotonic() - started >= 1.0
    zd.fail_next("view", "rate_limit", retry_after="600")
    with pytest.raises(SourceError, match=r"HTTP 429, Retry-After: 600"):
        fetch_tickets(f"view:{view['id']}", limit=10)
