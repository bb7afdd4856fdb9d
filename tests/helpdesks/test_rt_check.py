"""The RT channel's check (writes nothing, names each problem) and the look-up without full-text search."""

import subprocess
import sys
import urllib.parse

import pytest

from ops.rt_server import CF_NAME, set_full_text
from tests.conftest import ROOT
from ticketagent.channels.registry import get_channel
from ticketagent.channels.rt import RTChannel, key_marker

from .conftest import rt_environment

pytestmark = pytest.mark.django_db


def newest_transaction(rt) -> int:
    query = urllib.parse.quote("id > 0")
    answer = rt.get(f"/transactions?query={query}&orderby=id&order=DESC&per_page=1", user="root",
                    password=rt.admin_password)
    return int(answer.body["items"][0]["id"])


def test_the_check_passes_against_the_test_rt_and_writes_nothing(rt_server, rt_settings):
    rt = rt_server
    rt.create_ticket("Something to check against")
    before, mails = newest_transaction(rt), len(rt.mails())
    assert get_channel("helpdesk").check() == []
    assert newest_transaction(rt) == before and len(rt.mails()) == mails


def test_the_check_names_wrong_credentials(rt_settings):
    rt_settings.HELPDESK_PASSWORD = "not-the-password"
    [problem] = get_channel("helpdesk").check()
    assert "refused the credentials of 'agent' (401)" in problem and "HELPDESK_PASSWORD" in problem


def test_the_check_names_a_url_that_is_not_rt(rt_server, rt_settings):
    rt_settings.HELPDESK_URL = rt_server.base_url + "/not-rt"
    [problem] = get_channel("helpdesk").check()
    assert "no REST2 API at" in problem and "HELPDESK_URL must be RT's base URL" in problem
    rt_settings.HELPDESK_URL = "http://127.0.0.1:9"
    [problem] = get_channel("helpdesk").check()
    assert "could not reach Request Tracker" in problem


def test_the_check_names_a_missing_custom_field_and_a_missing_escalation_queue(rt_server, rt_settings):
    rt_settings.RT_CUSTOM_FIELD = "NoSuchField"
    rt_settings.RT_ESCALATION_QUEUE = "Nowhere"
    problems = get_channel("helpdesk").check()
    assert any("custom field 'NoSuchField' is not applied to queue(s)" in p for p in problems), problems
    assert any("RT_ESCALATION_QUEUE='Nowhere': no such queue" in p for p in problems), problems


def test_the_check_names_missing_rights(rt_server, rt_settings):
    rt_server.create_ticket("A ticket the viewer may only look at")
    channel = RTChannel(user="viewer", password=rt_server.users["viewer"])
    problems = channel.check()
    assert any("lacks SeeCustomField" in p for p in problems), problems
    assert any("'viewer' lacks ReplyToTicket, CommentOnTicket, ModifyTicket in queue Support (seen on its ticket"
               in p for p in problems), problems
    assert any("RT_ESCALATION_QUEUE='Escalations': no such queue visible to 'viewer'" in p for p in problems)


def test_the_check_names_create_ticket_missing_in_the_escalation_queue(rt_server, rt_settings):
    """The rights docs/channels.md once listed (no CreateTicket in the escalation
    queue): the check says which right, which queue, which user."""
    rt_server.create_ticket("A ticket the listed user could escalate")
    problems = RTChannel(user="listed", password=rt_server.users["listed"]).check()
    assert problems == ["'listed' lacks CreateTicket in queue Escalations (RT_ESCALATION_QUEUE): RT moves a ticket "
                        "into a queue only for a user who may create tickets there"], problems


def test_the_check_names_an_escalation_with_nothing_to_change(rt_settings):
    rt_settings.RT_ESCALATION_QUEUE, rt_settings.RT_ESCALATION_PRIORITY = "", None
    assert "escalate has nothing to change" in " ".join(get_channel("helpdesk").check())


def test_without_full_text_search_the_check_says_so_and_look_up_reads_the_history(rt_server, rt_settings):
    """RT without full-text search turns every condition on Content into
    `id = 0`: a search by content finds nothing, silently. The check names it,
    and the look-up still finds a reply whose custom field was lost, by
    reading the ticket's replies and comments."""
    rt = rt_server
    ticket = rt.create_ticket("Full-text search off")
    key = "k" + "0123456789abcdef" * 4
    answer = rt.post(f"/ticket/{ticket}/correspond", {"Content": "<p>Hello</p>" + key_marker(key),
                                                      "ContentType": "text/html", "TxnCustomFields": {CF_NAME: key}},
                     user="replier")
    assert answer.status == 201
    channel = get_channel("helpdesk")
    set_full_text(rt, False)
    try:
        by_content = rt.get("/transactions?query=" + urllib.parse.quote(f"Content LIKE '{key}'")).body["items"]
        assert by_content == []
        problems = channel.check()
        assert any("full-text search is off" in p for p in problems), problems
        found = channel.lookup(key, {"ticket": str(ticket)})
        assert found.found is True and found.detail.startswith(f"found in ticket {ticket}'s history")
        absent = channel.lookup("k" + "f" * 64, {"ticket": str(ticket)})
        assert absent.found is False and "none of its 1 replies and comments carries the key" in absent.detail
    finally:
        set_full_text(rt, True)
    assert channel.check() == []


def test_helpdesk_check_command_shows_rt_and_its_abilities(rt_server):
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin", **rt_environment(rt_server)}
    done = subprocess.run([sys.executable, "manage.py", "helpdesk-check", "--no-email"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"helpdesk: Request Tracker (rt) at {rt_server.base_url} as agent" in done.stdout
    assert "key sent with each write: transaction custom field IdempotencyKey and an HTML-comment marker" \
        in done.stdout
    assert "look-up by key: CF.{IdempotencyKey} search" in done.stdout
    assert rt_server.password not in done.stdout + done.stderr
    assert done.stdout.strip().endswith("ready")
