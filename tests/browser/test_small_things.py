"""Small things an operator trips over on every page.

Before: /favicon.ico answered 404 on every page; the upload form's help text
sat between a label and its field; there was no skip link (tested with the
keyboard in test_every_page)."""

import pytest
from playwright.sync_api import expect

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_no_page_asks_for_something_that_is_not_there(page, live_server, alice):
    missing = []
    page.on("response", lambda r: r.status == 404 and missing.append(r.url))
    login(page, "alice", "alice-pass-123")
    for url in ("/", "/review/", "/upload/", "/workers/"):
        page.goto(url)
    favicon = page.request.get("/favicon.ico")
    assert favicon.status == 200 and favicon.headers["content-type"] == "image/x-icon"
    assert favicon.body()[:4] == b"\x00\x00\x01\x00", "an ICO file"
    assert missing == []


def test_upload_help_text_follows_the_field_it_explains(page, live_server, alice):
    login(page, "alice", "alice-pass-123")
    page.goto("/upload/")
    for name in ("file", "allow_auto_close", "failure_threshold"):
        field = page.locator(f"#upload-form [name={name}]")
        help_id = field.get_attribute("aria-describedby")
        assert help_id, name
        expect(page.locator(f"#{help_id}")).to_be_visible()
        order = page.evaluate("""([name, helpId]) => {
            const field = document.querySelector(`#upload-form [name=${name}]`);
            const help = document.getElementById(helpId);
            const label = document.querySelector(`label[for=${field.id}]`);
            const after = (a, b) => Boolean(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
            return {fieldBeforeHelp: after(field, help), labelBeforeField: after(label, field) || label.contains(field)};
        }""", [name, help_id])
        assert order == {"fieldBeforeHelp": True, "labelBeforeField": True}, (name, order)
