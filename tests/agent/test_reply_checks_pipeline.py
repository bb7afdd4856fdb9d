"""A draft that promises, leaks a secret or copies the customer's data back, through the real pipeline: held
for approval on real workers (the model a scripted fake OpenAI server), nothing sent, and what matched shown
-- escaped, a secret masked -- on Review's approval row and on the item's page."""

import pytest

from ticketagent.models import ItemStatus
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.playbooks.standard import standard_spec

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def published():
    data = {**standard_spec().model_dump(mode="json"), "name": "Checked replies"}
    return version_publish(version_id=playbook_import(data=data).pk)


def run_one(workers, openai_server, draft: str, *, ticket: str):
    """One ticket (its body `ticket`) whose draft the model writes as `draft`, run by a real burst worker."""
    openai_server.configure(answers={"Reply": {"subject": "Re: your refund", "body": draft}})
    task = make_task(1, playbook_version=published(), body=ticket)
    assert workers.burst(extra_env=openai_server.worker_env) == 0, workers.logs()
    item = task.items.get()
    item.checkpoint.refresh_from_db()
    return item


def test_a_draft_promising_a_refund_is_held_with_the_promise_on_the_pages(workers, sandbox, openai_server, client,
                                                                           alice):
    promise = "Your refund of $2,880 has been approved <b>today</b>."
    item = run_one(workers, openai_server, f"Hello, thank you for your patience with us. {promise} Best wishes.",
                   ticket="I returned the laptop. Where is my refund?")
    assert item.status == ItemStatus.WAITING_APPROVAL, workers.logs()
    assert "promise" in item.last_error and "reply check" in item.last_error
    checks = item.checkpoint.step_outputs["decide"]["checks"]
    assert [c["check"] for c in checks] == ["promise"] and checks[0]["matched"] == [promise]
    assert not sandbox.counts()["by_endpoint"].get("notify"), "the customer heard nothing"

    client.force_login(alice)
    escaped = "“Your refund of $2,880 has been approved &lt;b&gt;today&lt;/b&gt;.”"
    review = client.get("/review/").content.decode()
    row = review[review.index(f'id="approval-{item.pk}"'):]
    row = row[:row.index("</tr>")]
    assert "checks-matched" in row and "promise" in row and escaped in row
    page = client.get(f"/items/{item.pk}/").content.decode()
    assert escaped in page and "<b>today</b>" not in page.split('id="d-checks"')[1].split("</ul>")[0]


def test_a_draft_giving_away_a_password_shows_it_masked(workers, sandbox, openai_server, client, alice):
    item = run_one(workers, openai_server, "Hello, thank you for writing. I signed in for you with the password: "
                                           "Trailhead#2291 and the account works again.",
                   ticket="I can't log in. My password is Trailhead#2291.")
    assert item.status == ItemStatus.WAITING_APPROVAL, workers.logs()
    checks = {c["check"]: c for c in item.checkpoint.step_outputs["decide"]["checks"]}
    assert checks["secret"]["matched"] == ["a password Trai…"]
    client.force_login(alice)
    review = client.get("/review/").content.decode()
    row = review[review.index(f'id="approval-{item.pk}"'):]
    row = row[:row.index("</tr>")]
    held = row[row.index("checks-matched"):]
    held = held[:held.index("</ul>")]
    assert "a password Trai…" in held and "Trailhead#2291" not in held
