"""The kill test's operator: a person on the Review page, clicking at the worst moments.

At random moments it picks one of the task's unknown effects and either clicks "Reconcile now" or records a
verdict, both through the product's own views (a logged-in operator's POST, as the page sends it), never through
the services behind them. It clicks Reconcile now whenever it likes — before the settle time too: a "not found"
then must change nothing. It records a verdict the way a careful person does, after looking at the helpdesk
itself (the oracle): "happened" when the helpdesk holds the write; "did not happen" only when it does not and the
page says a look-up could answer honestly by now (`reconcile_not_before`); else it leaves the effect alone. A
helpdesk that cannot be asked this way (Request Tracker) gets Reconcile-now clicks only.
"""

from __future__ import annotations

import random
from collections import Counter

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from ledger.clock import db_now
from ledger.models import Effect, EffectState
from ledger.services import reconcile_not_before
from ticketagent.models import Task

USERNAME = "killtest-operator"


class Operator:
    """Clicks for one kill test run; `clicks` counts what it did (and what the pages answered)."""

    def __init__(self, rng: random.Random, holds, *, every: float = 0.25):
        """`holds(effect)`: True/False whether the helpdesk holds the effect's write, None if it cannot be told;
        `every`: the chance, at each look of the harness (5 a second), that the operator clicks."""
        self.rng, self.holds, self.every = rng, holds, every
        self.clicks: Counter = Counter()
        user, _ = get_user_model().objects.get_or_create(username=USERNAME)
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
        self.client = Client(HTTP_HOST="localhost")
        self.client.force_login(user)

    def play(self, task: Task) -> None:
        if self.rng.random() >= self.every:
            return
        unknown = list(Effect.objects.filter(owner_task=str(task.pk), state=EffectState.UNKNOWN))
        if not unknown:
            return
        effect = self.rng.choice(unknown)
        if self.rng.random() < 0.6:
            self._post("effect-reconcile", effect, {}, "reconcile now")
            return
        held = self.holds(effect)
        if held is True:
            self._post("effect-review", effect, {"verdict": "happened", "reason": "seen in the helpdesk"},
                       "verdict happened")
        elif held is False and db_now() >= reconcile_not_before(effect):
            self._post("effect-review", effect, {"verdict": "not_happened",
                                                 "reason": "not in the helpdesk, past its settle time"},
                       "verdict did not happen")
        else:
            self.clicks["left alone (may still land)"] += 1

    def _post(self, view: str, effect: Effect, data: dict, what: str) -> None:
        answer = self.client.post(reverse(view, args=[effect.pk]), data, HTTP_HX_REQUEST="true")
        self.clicks[what if answer.status_code == 200 else f"{what}: {answer.status_code}"] += 1
