"""An owner's history in the ledger: the transitions of its effects, read in id order for its own log."""

from collections.abc import Iterator

from ledger.statements import transitions_page


def owner_transitions(owner_task: str, chunk: int = 5000) -> Iterator[tuple]:
    """Each transition of the effects of `owner_task` that carries the effect's row, in id order, read `chunk`
    at a time: (id, at, event, snapshot as JSON text, from_state, note, actor, owner_item)."""
    last_id = 0
    while rows := transitions_page(owner_task, last_id, chunk):
        yield from rows
        last_id = rows[-1][0]
