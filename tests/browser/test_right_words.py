"""The right words at the right moment, at desktop and phone width.

Before: a viewer's plain-form POST got a bare 403 page; a form sent from a page older than the last sign-in said
"only operators may do this"; the verdict select defaulted to "happened" for an effect whose outcome nobody knows;
after "did not happen" the row showed a red "failed" while the email was being sent again, and the form said
"send again" where the row said "retry"; the 413 message ended in ".."."""

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from ..factories import make_task
from .conftest import assert_accessible, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = """() => JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"]"""
SUBMIT = """([action, token]) => {
    const form = document.createElement("form");
    form.method = "post"; form.action = action;
    const field = document.createElement("input");
    field.name = "csrfmiddlewaretoken"; field.value = token; form.appendChild(field);
    document.body.appendChild(form); form.submit();
}"""


@pytest.mark.parametrize("width", [1400, 390])
def test_refusals_say_why_and_the_verdict_is_chosen_not_assumed(page, live_server, queue, sandbox, unknown_effect,
                                                                alice, bob, width):
    task = make_task(1, name="Words")
    page.set_viewport_size({"width": width, "height": 900})

    # a viewer's plain form: a page that says why, not a bare 403
    login(page, "bob", "bob-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    token = page.evaluate(TOKEN)
    page.evaluate(SUBMIT, [f"/tasks/{task.pk}/pause/", token])
    expect(page.locator("#denied")).to_contain_text("Your role may not do this")
    assert_accessible(page, "the 403 page")

    # an operator's page from before she signed in again elsewhere: out of date, not "only operators"
    login(page, "alice", "alice-pass-123")
    page.goto(f"/tasks/{task.pk}/")
    stale = page.evaluate(TOKEN)
    other = page.context.new_page()
    page.context.clear_cookies()
    login(other, "alice", "alice-pass-123")
    other.close()
    page.locator("#pause").click()  # the old page's own button: htmx sends the old token
    expect(page.locator("#flash")).to_contain_text("This page is out of date: you signed in again since it was loaded")
    page.evaluate(SUBMIT, [f"/tasks/{task.pk}/pause/", stale])  # and a plain form
    expect(page.locator("#csrf-denied")).to_contain_text("loaded before you signed in again")

    # an unknown effect: the verdict is chosen, never preset; "did not happen" reads as what follows
    effect = unknown_effect()
    page.goto("/review/")
    row = page.locator(f"#effect-{effect.pk}")
    verdict = row.get_by_label("verdict")
    assert verdict.evaluate("s => s.value") == ""
    row.get_by_label("reason").fill("The helpdesk has no such reply")
    row.get_by_role("button", name="Decide").click()  # no verdict chosen: the browser asks for one, nothing sent
    assert verdict.evaluate("s => s.validity.valueMissing")
    verdict.select_option("not_happened")
    expect(verdict.locator("option:checked")).to_have_text("did not happen — retry (sent again with the same key)")
    row.get_by_role("button", name="Decide").click()
    expect(row.locator(".status")).to_have_text("to be sent again")
    expect(row.locator(".resolution")).to_contain_text("“did not happen — retry”")
    assert_accessible(page, "a verdict given")

    # a request over the limit: one full stop
    with override_settings(REQUEST_MAX_BYTES=2048):
        page.evaluate(f"() => htmx.ajax('POST', '/tasks/{task.pk}/pause/', "
                      "{values: {pad: 'x'.repeat(5000)}, swap: 'none'})")
        flash = page.locator("#flash")
        expect(flash).to_contain_text("Request too large")
        assert not flash.inner_text().endswith(".."), flash.inner_text()
