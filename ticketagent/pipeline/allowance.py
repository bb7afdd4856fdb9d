"""A model call's allowance under its task's budget: its bound reserved before the call, waited for, or the item stops.

The model client asks it before each call of an item of a task with a budget
(`llm.base.Allowance`); see `pipeline/budget.py` for the rule.
"""

import time
from dataclasses import dataclass

from ticketagent.pipeline.budget import RESERVE_WAIT_SECONDS, RESERVED, WAIT, call_bound
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
        the task are in flight; CallRefused once the item was handed back."""
        bound = call_bound(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        while (answer := phase_reserve(self.run, bound))[0] == WAIT:
            if process_stopping():  # the worker's grace is not for waiting on others' calls
                item_hand_back(self.run, why="the worker is stopping")
                raise CallRefused("the worker is stopping")
            time.sleep(RESERVE_WAIT_SECONDS)
        if answer[0] != RESERVED:  # STOP: the phase handed the item back
            raise CallRefused(f"task {answer[1]}")
