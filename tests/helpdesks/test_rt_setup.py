"""`manage.py rt-setup`'s RT data file applied to the real RT with RT's own loader, as an administrator does:
it creates the queues, custom field, group and rights, applying it again changes nothing, and an account set up
by it alone passes the check and escalates."""

import io
import uuid

import pytest
from django.core.management import call_command

from ledger.gate import effect_run
from ledger.models import EffectState
from ops.rt_server import CF_NAME, RTServerError, insert_datafile
from ticketagent.channels.rt import RTChannel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh(rt_server, tmp_path):
    """A new RT user, and the data file `manage.py rt-setup` writes for it and two new queues."""
    tag = uuid.uuid4().hex[:6]
    name, password = f"agent-{tag}", f"pw-{tag}-secret"
    answer = rt_server.post("/user", {"Name": name, "Password": password, "EmailAddress": f"{name}@rt.test",
                                      "Privileged": 1}, user="root", password=rt_server.admin_password)
    assert answer.status == 201, answer.body
    datafile = tmp_path / f"ticketagent-{tag}.pm"
    call_command("rt-setup", "--user", name, "--queue", f"Work-{tag}", "--escalation-queue", f"Tier2-{tag}",
                 "--escalation-owner", "", "--group", f"Agents {tag}", "--output", str(datafile))
    return {"tag": tag, "user": name, "password": password, "datafile": datafile, "queue": f"Work-{tag}",
            "escalation": f"Tier2-{tag}"}


def test_the_data_file_sets_up_rt_so_the_check_passes_and_escalate_works(rt_server, rt_settings, fresh):
    rt = rt_server
    first = insert_datafile(rt, fresh["datafile"])
    for line in (f"created queue {fresh['queue']}", f"created queue {fresh['escalation']}",
                 f"applied {CF_NAME} to queue {fresh['queue']}", f"created group Agents {fresh['tag']}",
                 f"added {fresh['user']} to group", f"granted CreateTicket in queue {fresh['escalation']}",
                 f"granted ModifyCustomField in queue {fresh['queue']}"):
        assert f"ticketagent: {line}" in first, first
    assert f"granted CreateTicket in queue {fresh['queue']} " not in first
    again = insert_datafile(rt, fresh["datafile"])
    assert "ticketagent: created" not in again and "ticketagent: granted" not in again
    assert "ticketagent: ready" in again

    rt_settings.RT_ESCALATION_QUEUE = fresh["escalation"]
    channel = RTChannel(user=fresh["user"], password=fresh["password"])
    report = channel.check_report()  # an RT this user sees as fresh: no ticket yet
    assert report.problems == []
    assert any("have no ticket yet" in u and fresh["queue"] in u for u in report.unverified), report.unverified
    assert any("full-text search is on" in u for u in report.unverified), report.unverified
    out = io.StringIO()
    rt_settings.HELPDESK_USER, rt_settings.HELPDESK_PASSWORD = fresh["user"], fresh["password"]
    call_command("helpdesk-check", "--no-email", stdout=out, stderr=out)
    shown = out.getvalue()
    assert "not verified yet: queue(s)" in shown and shown.strip().endswith("ready"), shown
    assert fresh["password"] not in shown

    created = rt.post("/ticket", {"Queue": fresh["queue"], "Subject": "Set up by the data file",
                                  "Requestor": "ann@example.com", "Content": "Hello"}, user="root",
                      password=rt.admin_password)
    assert created.status == 201, created.body
    ticket = int(created.body["id"])
    assert channel.check() == []  # the ticket now shows the rights on it
    result = effect_run(action="escalate", payload={"ticket": str(ticket), "body": {"note": "second tier"}},
                        owner_task=f"setup-{fresh['tag']}", owner_item="i1", owner_step="escalate",
                        claim_token="w", channel=channel)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    now = rt.get(f"/ticket/{ticket}?fields[Queue]=Name", user="root", password=rt.admin_password).body
    assert now["Queue"]["Name"] == fresh["escalation"] and now["Priority"] == "100"


def test_the_data_file_stops_naming_a_user_that_does_not_exist(rt_server, tmp_path):
    datafile = tmp_path / "nobody.pm"
    call_command("rt-setup", "--user", "no-such-agent", "--queue", "General", "--output", str(datafile))
    with pytest.raises(RTServerError, match="the RT user no-such-agent does not exist: create it"):
        insert_datafile(rt_server, datafile)


def test_rt_setup_refuses_a_name_it_cannot_quote(tmp_path):
    from django.core.management.base import CommandError
    with pytest.raises(CommandError, match=r"the queue \"it's\" cannot be used"):
        call_command("rt-setup", "--user", "agent", "--queue", "it's", "--output", str(tmp_path / "x.pm"))
