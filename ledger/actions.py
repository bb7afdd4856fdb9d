"""What an action is to the ledger: its name, its effect class and its channel.

The owner of the effects registers its table of actions (the setting
LEDGER_ACTIONS); each channel's adapter maps an action to its own API.
`once` and `irreversible` actions get a slot.
"""

import functools
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ledger.models import EffectClass


@dataclass(frozen=True)
class ActionSpec:
    name: str
    effect_class: str
    channel: str
    description: str

    @property
    def slotted(self) -> bool:
        return self.effect_class in (EffectClass.ONCE, EffectClass.IRREVERSIBLE)

    @property
    def needs_approval(self) -> bool:
        """Irreversible actions never run without a recorded approval."""
        return self.effect_class == EffectClass.IRREVERSIBLE


def registered_actions() -> dict[str, ActionSpec]:
    """The owner's action table, named by the setting LEDGER_ACTIONS (a dotted path to a dict of `ActionSpec`
    by name), as Django's mail backend is named by EMAIL_BACKEND: the ledger knows no action of its own."""
    return _table(settings.LEDGER_ACTIONS)


@functools.cache
def _table(path: str) -> dict[str, ActionSpec]:
    table = import_string(path)
    for name, spec in table.items():
        if not isinstance(spec, ActionSpec) or spec.name != name:
            raise ImproperlyConfigured(f"LEDGER_ACTIONS ({path}): {name!r} is not an ActionSpec of that name")
    return table


def action_spec(name: str) -> ActionSpec:
    actions = registered_actions()
    try:
        return actions[name]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(sorted(actions))}") from None
