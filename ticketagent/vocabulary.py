"""The words a model's answer and a playbook share: the actions an agent may propose, the priorities and the statuses.

The action allow-list lives here: nothing a ticket says can add to it.
"""

from typing import Literal

Priority = Literal["low", "normal", "high", "urgent"]
Action = Literal["save_draft", "notify_customer", "set_status", "close_ticket", "escalate"]
HelpdeskStatus = Literal["open", "pending", "solved", "escalated", "on_hold"]
