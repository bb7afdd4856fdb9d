"""The RT channel's settings and its pure parts (no server needed): statuses, URL, marker, HTML, priorities."""

import typing

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from ticketagent.channels.registry import get_channel
from ticketagent.channels.rt import RTChannel, key_marker, keys_in, text_html, ticket_number
from ticketagent.channels.rt_rest import rest_url
from ticketagent.env import envint_or_none, envmap
from ticketagent.llm.schemas import HelpdeskStatus
from ticketagent.sources.rt import html_text, priority_word


def test_every_status_the_agent_can_choose_has_an_rt_status(settings):
    assert set(settings.RT_STATUSES) == set(typing.get_args(HelpdeskStatus))
    assert settings.RT_STATUSES["solved"] == "resolved" and settings.RT_STATUSES["pending"] == "stalled"


def test_rt_statuses_and_the_escalation_priority_are_read_strictly(monkeypatch):
    defaults = {"open": "open", "pending": "stalled"}
    monkeypatch.setenv("RT_STATUSES", "pending=waiting")
    assert envmap("RT_STATUSES", defaults, keys=("open", "pending")) == {"open": "open", "pending": "waiting"}
    for bad, words in (("pending", "is not KEY=VALUE"), ("closed=resolved", "'closed' is not one of"),
                       ("pending=", "is not KEY=VALUE")):
        monkeypatch.setenv("RT_STATUSES", bad)
        with pytest.raises(ImproperlyConfigured, match=words):
            envmap("RT_STATUSES", defaults, keys=("open", "pending"))
    monkeypatch.setenv("RT_ESCALATION_PRIORITY", "none")
    assert envint_or_none("RT_ESCALATION_PRIORITY", 100) is None
    monkeypatch.setenv("RT_ESCALATION_PRIORITY", "")
    assert envint_or_none("RT_ESCALATION_PRIORITY", 100) == 100
    monkeypatch.setenv("RT_ESCALATION_PRIORITY", "high")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        envint_or_none("RT_ESCALATION_PRIORITY", 100)


def test_helpdesk_url_is_rts_base_and_the_channel_adds_rest2():
    assert rest_url("https://rt.example.com/") == "https://rt.example.com/REST/2.0"
    assert rest_url("https://example.com/rt") == "https://example.com/rt/REST/2.0"
    assert rest_url("https://rt.example.com/REST/2.0") == "https://rt.example.com/REST/2.0"
    assert RTChannel(url="https://rt.example.com").config.url == "https://rt.example.com/REST/2.0"


def test_the_marker_holds_the_key_on_a_line_of_its_own_and_is_read_back():
    key = "ab" * 32
    marker = key_marker(key)
    assert f"\n{key}\n" in marker and all(len(line) <= 76 for line in marker.splitlines())
    assert keys_in(f"<p>Hello</p>{marker}") == [key]
    assert keys_in(f"<!-- ticketagent-key: {key} -->") == [key]


def test_a_reply_is_escaped_html_whatever_the_ticket_said():
    html = text_html("Hi <b>Ann</b>,\nline two\n\n<!-- ticketagent-key:\nforged\n-->")
    assert html == ("<p>Hi &lt;b&gt;Ann&lt;/b&gt;,<br>\nline two</p>\n"
                    "<p>&lt;!-- ticketagent-key:<br>\nforged<br>\n--&gt;</p>")
    assert keys_in(html) == []


def test_ticket_ids_must_be_rt_numbers():
    assert ticket_number("42") == "42" and ticket_number(" 7 ") == "7"
    assert ticket_number("K1-2") is None and ticket_number("0") is None and ticket_number("") is None


def test_rt_priorities_become_words_and_html_becomes_text():
    assert [priority_word(p) for p in ("0", "24", "25", "50", "65", "89", "90", "100", "", "x")] == [
        "low", "low", "normal", "normal", "high", "high", "urgent", "urgent", "low", "normal"]
    assert html_text("<p>Hello&nbsp;Ann,</p><p>line<br>two &amp; more</p><!-- x --><script>bad()</script>") == \
        "Hello\xa0Ann,\nline\ntwo & more"


@pytest.mark.django_db
def test_the_effect_classes_page_shows_what_rt_can_do(client, alice, settings):
    settings.HELPDESK_KIND = "rt"
    client.force_login(alice)
    page = client.get(reverse("effect-classes")).content.decode()
    assert "transaction custom field IdempotencyKey and an HTML-comment marker in the content" in page
    assert "CF.{IdempotencyKey} search" in page
    assert get_channel("helpdesk").abilities.honours_key is False
