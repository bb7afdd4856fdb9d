"""The Kestrel rehearsal end to end: the shipped playbook and labelled file, uploaded as a rehearsal, run by the
real pipeline with the offline model; the report's agreement table shows category, priority, status and actions.

The numbers are those docs/playbooks.md gives (and test_playbook_kestrel.py
measures without the database).
"""

import pytest
import yaml
from django.urls import reverse

from ticketagent.models import ItemStatus
from ticketagent.pipeline.run import item_process
from ticketagent.playbooks.services import playbook_import, version_publish
from ticketagent.services.upload import task_upload

from . import kestrel

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_report_shows_agreement_on_category_priority_status_and_actions(settings, queue, client, bob):
    settings.OPENAI_API_KEY = ""  # the offline model
    version = version_publish(version_id=playbook_import(
        data=yaml.safe_load(kestrel.PLAYBOOK.read_text(encoding="utf-8"))).pk)
    task = task_upload(data=kestrel.REHEARSAL.read_bytes(), filename="rehearsal-kestrel.csv", rehearsal=True,
                       playbook_version=version, name="Kestrel rehearsal")
    items = list(task.items.order_by("row"))
    assert len(items) == 40
    for item in items:
        item_process(item_id=item.pk, attempt=item.attempt)
    for item in items:
        item.refresh_from_db()
        assert item.status == ItemStatus.DONE, (item.ticket_id, item.last_error)
    client.force_login(bob)
    response = client.get(reverse("rehearsal", args=[task.pk]))
    assert response.status_code == 200
    got = {a.field: (a.agree, a.n) for a in response.context["summary"].agreement}
    assert got == {"category": (39, 40), "priority": (39, 40), "status": (40, 40), "actions": (40, 40)}
    body = response.content.decode()
    assert 'data-field="status"><th scope="row">status</th><td>40</td><td>40</td><td><b>100%</b>' in body
    item = task.items.get(ticket_id="KC-1029")
    page = client.get(reverse("item-detail", args=[item.pk])).content.decode()
    assert "by rule \u201cRule 10: safety is always urgent\u201d" in page
    assert "by rule \u201cRule 17: an escalated ticket is escalated, never closed\u201d" in page
    assert "by rule \u201cRule 21: safety goes to the safety team, the reply at once\u201d" in page
