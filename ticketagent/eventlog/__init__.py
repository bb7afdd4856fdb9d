"""The event log: append-only records written in the transaction of each change, exported as JSONL and replayed.

`append` (events and content-addressed blobs), `receivers` (the ledger's
transitions into a task's log), `export` (one JSON line per event), `replay`
(rebuild checkpoints and effects from the log alone, and compare).
"""
