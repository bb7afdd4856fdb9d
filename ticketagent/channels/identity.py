"""Which helpdesk a process reaches: the identity the helpdesk itself reports, with its kind and URL for people.

A task is bound to the helpdesk it was created for (`Task.helpdesk_id`); a
worker serves the helpdesk its settings reach (`served.helpdesk_served`), and takes
only the items of tasks bound to that one (`ticketagent.scheduling.jobs.queue_name`
routes them; the lease checks again). Identities are compared, never URLs:
two URLs may reach one helpdesk, and one URL may reach another helpdesk
tomorrow. Each adapter says how its system reports who it is
(`identity()`): the sandbox its instance id, RT the moment its database was
initialised, Zendesk its account URL.
"""

from dataclasses import dataclass


class IdentityUnknown(Exception):
    """The helpdesk did not say who it is (no connection, no answer, an answer that is not one)."""


@dataclass(frozen=True)
class Helpdesk:
    kind: str
    url: str
    id: str  # what the helpdesk reports: the one thing compared

    @property
    def label(self) -> str:
        return helpdesk_label(self.kind, self.url, self.id)


def helpdesk_label(kind: str, url: str, ident: str) -> str:
    """How people read a helpdesk: its kind and URL, and the identity it reported."""
    return f"{kind} helpdesk at {url} ({ident})"
