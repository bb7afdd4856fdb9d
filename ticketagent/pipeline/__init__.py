"""The worker's side of an item: lease, atomic phases, steps, and the agent's tools.

`run.item_process()` runs one item from its checkpoint: `lease` (who may
write the item), `phases` (each phase one transaction ending in a recovery
point), `steps` (a model step or an effect step through the ledger's gate),
`tools` (what the model may read while drafting).
"""
