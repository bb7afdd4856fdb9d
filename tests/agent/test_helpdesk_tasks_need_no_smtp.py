"""A task whose replies go through the helpdesk needs no mail server: every action it takes is the helpdesk's
(docs/deploy.md, "Is SMTP needed?"). Real workers, the sandbox helpdesk, and a mail server that is not there."""

import pytest

from ops.processes import free_port
from ticketagent.actions import ACTIONS
from ticketagent.models import ItemStatus, NotifyChannel
from ticketagent.plan import EFFECT_STEPS, effect_action
from ticketagent.services import ServiceError
from ticketagent.services.readiness import helpdesk_ready

from ..factories import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def test_only_the_email_notification_uses_smtp():
    channels = {notify: {step: ACTIONS[effect_action(step, notify_channel=notify)].channel for step in EFFECT_STEPS}
                for notify in NotifyChannel.values}
    assert set(channels[NotifyChannel.HELPDESK].values()) == {"helpdesk"}
    assert {step for step, channel in channels[NotifyChannel.EMAIL].items() if channel == "email"} == {
        "notify_customer"}


def test_helpdesk_tasks_run_every_action_with_no_mail_server(workers, sandbox, openai_server, settings):
    nowhere = str(free_port())  # nothing listens: any SMTP call would fail its item
    settings.EMAIL_PORT = int(nowhere)
    settings.HELPDESK_CHECK_BEFORE_TASKS = True
    helpdesk_ready(notify_channel=NotifyChannel.HELPDESK)  # a helpdesk task is created without the mail server
    with pytest.raises(ServiceError, match="the mail server is not ready"):
        helpdesk_ready(notify_channel=NotifyChannel.EMAIL)
    settings.HELPDESK_CHECK_BEFORE_TASKS = False

    openai_server.configure(answers={"Decision": {"actions": list(EFFECT_STEPS), "status": "solved",
                                                  "reason": "answered, handed on and closed"}})
    task = make_task(2, allow_auto_close=True)
    assert workers.burst(extra_env={**openai_server.worker_env, "EMAIL_PORT": nowhere}) == 0, workers.logs()
    assert set(task.items.values_list("status", flat=True)) == {ItemStatus.DONE}, workers.logs()
    delivered = sandbox.counts()["by_endpoint"]
    assert {endpoint: delivered[endpoint] for endpoint in ("draft", "notify", "status", "escalate", "close")} == {
        "draft": 2, "notify": 2, "status": 2, "escalate": 2, "close": 2}, delivered
    assert delivered["email"] == 0
