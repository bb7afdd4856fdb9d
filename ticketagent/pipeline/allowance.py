"""A model call's allowance under its task's budget: its bound reserved before the call, waited for, or the item stops.

The model client asks it before each call of an item of a task with a budget
(`llm.base.Allowance`); see `pipeline/budget.py` for the rule.
"""

import time
from dataclasses import dataclass

from django.conf import settings

from ticketagent.pipeline.budget import RESERVE_WAIT_LEASES, RESERVE_WAIT_SECONDS, RESERVED, WAIT, call_bound
from ticketagent.pipeline.lease import ItemRun
from ticketagent.pipeline.phases import item_hand_back, phase_reserve
from ticketagent.stopping import process_stopping


class CallRefused(Exception):
    """The item left this worker before a model call (nothing called): its task reached its budget or stopped, or
    the worker is stopping."""


@dataclass
class CallAllowance:
    run: ItemRun

    def reserve(self, *, prompt_tokens: int, completion_tokens: int) -> None:
        """The call's bound reserved (`phases.phase_reserve`), after waiting while it does not fit yet and calls of
        the task are in flight, as long as the task spends on (at most RESERVE_WAIT_LEASES lease times since it last
        spent: a waiter that others beat to the room freed is not the task's end); CallRefused once the item was
        handed back."""
        bound = call_bound(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        longest = RESERVE_WAIT_LEASES * settings.LEASE_SECONDS
        give_up, spent = time.monotonic() + longest, None
        while (answer := phase_reserve(self.run, bound, may_wait=time.monotonic() < give_up))[0] == WAIT:
            if answer[2] != spent:
                give_up, spent = time.monotonic() + longest, answer[2]
            if process_stopping():  # the worker's grace is not for waiting on others' calls
                item_hand_back(self.run, why="the worker is stopping")
                raise CallRefused("the worker is stopping")
            time.sleep(RESERVE_WAIT_SECONDS)
        if answer[0] != RESERVED:  # STOP: the phase handed the item back
            raise CallRefused(f"task {answer[1]}")
