"""The ticket agents: a Django project whose agents triage tickets and act on a helpdesk exactly once.

`models` (tasks, items, checkpoints, events), `services` (operator and upload
actions), `pipeline` (the worker side of an item), `llm` (the model boundary),
`jobs` (the queue), `recovery` (the sweep), `eventlog`, `health`, `web` (the
pages), `upload` (the batch parser). The effect protocol itself is `ledger`.
"""
