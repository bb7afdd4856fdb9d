"""The reply checks in the browser editor: a lead turns them on and off, writes the phrase lists and the
contact allow-list, and sees them on the version page; what does not validate is refused beside its field."""

import pytest
from django.urls import reverse

from .test_playbook_pages import content_of, draft, erin, published, reply_data, spec_of  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db]


def test_a_lead_edits_the_checks_and_the_page_shows_them(client, erin, draft):  # noqa: F811
    client.force_login(erin)
    data = reply_data(spec_of(draft), **{
        "checks-promise_phrases": "en: we will refund, by {date}\nde: wir erstatten",
        "checks-contacts_allowed": "+49 30 5550 1200\nhttps://help.kestrel.example",
        "checks-internal_fields": "internal_note, agent_notes",
        "checks-article_cues": "en: article, see",
    })
    del data["checks-money"]
    response = client.post(reverse("playbook-reply", args=[draft.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    checks = spec_of(draft).checks
    assert checks.promise_phrases == {"en": ["we will refund", "by {date}"], "de": ["wir erstatten"]}
    assert checks.contacts_allowed == ["+49 30 5550 1200", "https://help.kestrel.example"]
    assert checks.internal_fields == ["internal_note", "agent_notes"] and checks.money is False
    assert checks.article_cues == {"en": ["article", "see"]} and checks.secrets and checks.personal_data
    page = client.get(reverse("playbook-version", args=[draft.pk])).content.decode()
    assert "+49 30 5550 1200" in page and "we will refund" in page
    assert 'id="check-money">not checked' in page and 'id="check-secrets">held for approval' in page


def test_saving_another_setting_keeps_the_phrase_lists(client, erin, draft):  # noqa: F811
    client.force_login(erin)
    before = spec_of(draft).checks
    response = client.post(reverse("playbook-reply", args=[draft.pk]),
                           reply_data(spec_of(draft), **{"reply-max_chars": "1500"}))
    assert response.status_code == 302
    assert spec_of(draft).checks == before and spec_of(draft).reply.max_chars == 1500


@pytest.mark.parametrize(("field", "value", "message"), [
    ("checks-contacts_allowed", "call us any time", "&#x27;call us any time&#x27; is not a phone number"),
    ("checks-promise_phrases", "we will refund", "line 1: starts with a language code and a colon"),
    ("checks-promise_phrases", "english: we will refund", "&#x27;english&#x27; is not a language code"),
])
def test_what_does_not_validate_is_refused_beside_its_field(client, erin, draft, field, value, message):  # noqa: F811
    client.force_login(erin)
    before = content_of(draft)
    response = client.post(reverse("playbook-reply", args=[draft.pk]), reply_data(spec_of(draft), **{field: value}))
    body = response.content.decode()
    assert response.status_code == 400 and message in body, body[:3000]
    assert content_of(draft) == before
