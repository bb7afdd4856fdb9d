"""The production stack in a browser: DEBUG off, gunicorn from the Procfile, collectstatic's hashed files
served by WhiteNoise, PostgreSQL, real worker and sweep processes. The pages load their CSS and htmx, and
an upload runs to 100%.

Before: with DEBUG off there was only the development server, and /static/app.css and the htmx script
answered 404.
"""

import re

import pytest
from playwright.sync_api import expect

from ..conftest import ROOT
from ..deploy.stack import OPERATOR
from .conftest import TIMEOUT_MS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HASHED = re.compile(r"\.[0-9a-f]{12}\.(css|js|ico)$")


def test_pages_load_css_and_htmx_and_an_upload_completes(chromium, production_stack):
    context = chromium.new_context(base_url=production_stack.url, viewport={"width": 1200, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    statics, failures, errors = [], [], []
    page.on("response", lambda r: "/static/" in r.url and statics.append((r.url, r.status)))
    page.on("requestfailed", lambda r: failures.append(r.url))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(OPERATOR[0])
        page.get_by_label("Password").fill(OPERATOR[1])
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r"/$"))

        # the stylesheet is applied (its rules are loaded) and htmx 2 runs, both from hashed file names
        assert page.evaluate("""() => [...document.styleSheets].some(
            s => s.href && /\\/static\\/app\\.[0-9a-f]{12}\\.css$/.test(s.href) && s.cssRules.length > 10)""")
        assert page.evaluate("() => window.htmx && window.htmx.version").startswith("2.")
        assert page.evaluate("() => getComputedStyle(document.querySelector('header.top')).display") != "inline"
        assert statics and all(status == 200 for _, status in statics), statics
        assert all(HASHED.search(url.split("?")[0]) for url, _ in statics), [u for u, _ in statics]

        page.locator("#nav-upload").click()
        page.locator("input[name=file]").set_input_files(str(ROOT / "docs" / "examples" / "tickets.csv"))
        page.locator("input[name=name]").fill("Production batch")
        page.get_by_role("button", name="Upload and start").click()
        page.wait_for_url(re.compile(r"/tasks/\d+/$"))
        expect(page.locator("#percent")).to_have_text("100%", timeout=120_000)
        expect(page.locator("#task-status")).to_have_text("completed")
        assert not failures and not errors, (failures, errors)
    except Exception:
        print(production_stack.logs())
        raise
    finally:
        context.close()
