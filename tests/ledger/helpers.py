from ledger.gate import effect_run

NOTIFY = {"ticket": "T-1", "body": {"to": "ann@example.com", "subject": "Re: refund", "body": "Your refund is on its way."}}


def run_notify(payload=None, *, lease_token="worker-a", item="i1", fence=None, action="notify_customer",
               step="notify_customer", then=None, channel=None):
    return effect_run(action=action, payload=payload or NOTIFY, owner_task="t1", owner_item=item,
                      owner_step=step, lease_token=lease_token, fence=fence, then=then, channel=channel)
