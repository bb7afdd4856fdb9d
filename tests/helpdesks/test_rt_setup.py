"""`manage.py rt-setup`'s RT data file applied to the real RT with RT's own loader, as an administrator does:
it applies the custom field, group and rights, applying it again changes nothing, and an account set up by it alone
passes the check and escalates.

What it relies on -- the agent's user, the queues, the escalation queue and owner -- must exist: rt-setup looks
them up in RT before writing the file and the file checks them again before changing anything, each failing
loudly (a non-zero exit naming what is missing and where it is configured). Before, a missing escalation owner
stopped the file half-way (queues, custom field, group and rights already applied) with RT's loader printing
"[error] Failed to run one of final actions" and exiting 0, and rt-setup never looked."""

import io
import subprocess
import sys
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import EffectState
from ops.rt_server import CF_NAME, RTServerError, insert_datafile
from tests.conftest import ROOT
from tests.gate_run import effect_run
from ticketagent.channels.rt import RTChannel

from .conftest import rt_environment

pytestmark = pytest.mark.django_db(transaction=True)


def as_root(rt, method: str, path: str, body=None):
    return rt.request(method, path, body, user="root", password=rt.admin_password)


@pytest.fixture
def fresh(rt_server, rt_settings):
    """A new RT user with no rights yet, two new queues (an administrator's to create), and the settings pointing
    the check at RT as that user."""
    rt, tag = rt_server, uuid.uuid4().hex[:6]
    name, password = f"agent-{tag}", f"pw-{tag}-secret"
    answer = as_root(rt, "POST", "/user", {"Name": name, "Password": password, "EmailAddress": f"{name}@rt.test",
                                           "Privileged": 1})
    assert answer.status == 201, answer.body
    for queue in (f"Work-{tag}", f"Tier2-{tag}"):
        answer = as_root(rt, "POST", "/queue", {"Name": queue})
        assert answer.status == 201, answer.body
    rt_settings.HELPDESK_USER, rt_settings.HELPDESK_PASSWORD = name, password
    return {"tag": tag, "user": name, "password": password, "queue": f"Work-{tag}", "escalation": f"Tier2-{tag}",
            "group": f"Agents {tag}"}


def rt_setup(fresh, tmp_path, *extra: str) -> tuple[str, object]:
    """`manage.py rt-setup` for the fresh user and queues; (what it said on stderr, the data file)."""
    datafile, err = tmp_path / f"ticketagent-{fresh['tag']}.pm", io.StringIO()
    call_command("rt-setup", "--user", fresh["user"], "--queue", fresh["queue"], "--escalation-queue",
                 fresh["escalation"], "--group", fresh["group"], "--output", str(datafile), *extra, stderr=err)
    return err.getvalue(), datafile


def nothing_applied(rt, fresh) -> None:
    """The group does not exist, the custom field is on neither queue, and the user still sees no queue."""
    groups = as_root(rt, "POST", "/groups", [{"field": "Name", "value": fresh["group"]}])
    assert groups.status == 200 and groups.body["items"] == [], groups.body
    for queue in (fresh["queue"], fresh["escalation"]):
        fields = as_root(rt, "GET", f"/queue/{queue}").body.get("TicketTransactionCustomFields") or []
        assert CF_NAME not in {f.get("name") for f in fields}, (queue, fields)
        assert rt.get(f"/queue/{queue}", user=fresh["user"], password=fresh["password"]).status == 403


def test_the_data_file_sets_up_rt_so_the_check_passes_and_escalate_works(rt_server, rt_settings, fresh, tmp_path):
    rt = rt_server
    said, datafile = rt_setup(fresh, tmp_path, "--escalation-owner", "")
    # the new user may not see the queues yet: said, and left to the data file
    assert f"not verified from here: the queue '{fresh['queue']}' (--queue)" in said, said
    first = insert_datafile(rt, datafile)
    for line in (f"applied {CF_NAME} to queue {fresh['queue']}", f"created group Agents {fresh['tag']}",
                 f"added {fresh['user']} to group", f"granted CreateTicket in queue {fresh['escalation']}",
                 f"granted ModifyCustomField in queue {fresh['queue']}"):
        assert f"ticketagent: {line}" in first, first
    assert "ticketagent: created queue" not in first
    assert f"granted CreateTicket in queue {fresh['queue']} " not in first
    again = insert_datafile(rt, datafile)
    assert "ticketagent: created" not in again and "ticketagent: granted" not in again
    assert "ticketagent: ready" in again
    assert "not verified from here" not in rt_setup(fresh, tmp_path, "--escalation-owner", "")[0], \
        "once set up, the user sees its queues"

    rt_settings.RT_ESCALATION_QUEUE = fresh["escalation"]
    channel = RTChannel(user=fresh["user"], password=fresh["password"])
    report = channel.check_report()  # an RT this user sees as fresh: no ticket yet
    assert report.problems == []
    assert any("have no ticket yet" in u and fresh["queue"] in u for u in report.unverified), report.unverified
    assert any("full-text search is on" in u for u in report.unverified), report.unverified
    out = io.StringIO()
    call_command("helpdesk-check", "--no-email", stdout=out, stderr=out)
    shown = out.getvalue()
    assert "not verified yet: queue(s)" in shown and shown.strip().endswith("ready"), shown
    assert fresh["password"] not in shown

    created = as_root(rt, "POST", "/ticket", {"Queue": fresh["queue"], "Subject": "Set up by the data file",
                                              "Requestor": "ann@example.com", "Content": "Hello"})
    assert created.status == 201, created.body
    ticket = int(created.body["id"])
    assert channel.check() == []  # the ticket now shows the rights on it
    result = effect_run(action="escalate", payload={"ticket": str(ticket), "body": {"note": "second tier"}},
                        owner_task=f"setup-{fresh['tag']}", owner_item="i1", owner_step="escalate",
                        claim_token="w", channel=channel)
    assert result.state == EffectState.COMMITTED, result.effect.last_error
    now = as_root(rt, "GET", f"/ticket/{ticket}?fields[Queue]=Name").body
    assert now["Queue"]["Name"] == fresh["escalation"] and now["Priority"] == "100"


def test_a_missing_escalation_owner_fails_rt_setup_and_the_data_file_and_nothing_is_applied(
        rt_server, fresh, tmp_path):
    rt, owner = rt_server, f"lead-{fresh['tag']}"
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin", **rt_environment(rt),
           "HELPDESK_USER": fresh["user"], "HELPDESK_PASSWORD": fresh["password"], "RT_ESCALATION_OWNER": owner}
    datafile = tmp_path / "owner.pm"
    done = subprocess.run([sys.executable, "manage.py", "rt-setup", "--queue", fresh["queue"], "--escalation-queue",
                           fresh["escalation"], "--group", fresh["group"], "-o", str(datafile)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr
    assert f"the escalation owner '{owner}' (RT_ESCALATION_OWNER) does not exist in RT" in done.stderr, done.stderr
    assert "nothing written" in done.stderr and not datafile.exists()
    assert fresh["password"] not in done.stdout + done.stderr

    # written unchecked (an RT this host cannot reach), the file checks the owner itself: RT's loader exits
    # non-zero, naming it, and nothing of the file was applied
    call_command("rt-setup", "--user", fresh["user"], "--queue", fresh["queue"], "--escalation-queue",
                 fresh["escalation"], "--escalation-owner", owner, "--group", fresh["group"], "--no-check",
                 "-o", str(datafile))
    with pytest.raises(RTServerError) as failed:
        insert_datafile(rt, datafile)
    said = str(failed.value)
    assert "failed (exit 0)" not in said, "the loader's own exit code says so"
    assert f"the escalation owner '{owner}' (--escalation-owner) does not exist in RT" in said, said
    assert "stopped before changing anything" in said and "ticketagent: granted" not in said
    nothing_applied(rt, fresh)


def test_a_queue_that_does_not_exist_stops_the_data_file_before_anything_changes(rt_server, fresh, tmp_path):
    rt, typo = rt_server, f"Wrok-{fresh['tag']}"
    datafile, err = tmp_path / "typo.pm", io.StringIO()
    call_command("rt-setup", "--user", fresh["user"], "--queue", fresh["queue"], "--queue", typo,
                 "--escalation-queue", fresh["escalation"], "--escalation-owner", "", "--group", fresh["group"],
                 "-o", str(datafile), stderr=err)
    assert f"not verified from here: the queue '{typo}' (--queue)" in err.getvalue()
    with pytest.raises(RTServerError, match=rf"the queue '{typo}' \(--queue\) does not exist in RT"):
        insert_datafile(rt, datafile)
    assert as_root(rt, "GET", f"/queue/{typo}").status == 404, "no queue is created for a mistyped name"
    nothing_applied(rt, fresh)


def test_rt_setup_names_a_user_that_does_not_exist_and_writes_nothing(rt_server, fresh, tmp_path):
    datafile = tmp_path / "nobody.pm"
    with pytest.raises(CommandError, match=r"the RT user the agent acts as 'no-such-agent' \(--user\) does not "
                                           r"exist in RT"):
        call_command("rt-setup", "--user", "no-such-agent", "--queue", fresh["queue"], "--output", str(datafile))
    assert not datafile.exists()
    call_command("rt-setup", "--user", "no-such-agent", "--queue", fresh["queue"], "--output", str(datafile),
                 "--no-check")
    with pytest.raises(RTServerError, match=r"the RT user the agent acts as 'no-such-agent' \(--user\) does not "
                                            r"exist in RT"):
        insert_datafile(rt_server, datafile)


def test_rt_setup_refuses_a_name_it_cannot_quote(tmp_path):
    with pytest.raises(CommandError, match=r"the queue \"it's\" cannot be used"):
        call_command("rt-setup", "--user", "agent", "--queue", "it's", "--output", str(tmp_path / "x.pm"))
