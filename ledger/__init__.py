"""The effect ledger: a Django app that knows nothing about tickets.

Effect records, the dedupe gate, the effect-class table, channel adapters,
reconciliation and review verdicts. It never imports `ticketagent`.
"""
