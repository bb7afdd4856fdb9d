"""The kill test: "nothing twice, nothing lost" under SIGKILL (`python -m ops killtest`).

A harness that runs batches through real worker processes while killing
them, then compares what the sandbox helpdesk received with the ledger:

* workers SIGKILL themselves at injected points around external calls
  (before intent, after intent, after the call, after commit; one window
  chosen at random each time a worker starts), and the harness SIGKILLs
  whole workers (parent and work-horse) at random wall-clock moments, then
  restarts them as a supervisor would; each worker started runs its jobs
  in its own process or forks a work-horse per job (`WORKER_FORK`), at
  random, so both kinds are killed;
* optionally the queue's Redis database is flushed and PostgreSQL connections
  are terminated; and workers are made slow instead of dead (paused, their
  database answers stalled or cut, the helpdesk behind a gateway that answers
  504 and delivers later), one such fault per round (`slow`);
* every task is driven to an end: suspended tasks are resumed, unknown
  effects settle by reconcile, and for a channel without look-up the
  harness plays the operator, asking the sandbox (the oracle) and
  recording a review decision;
* at the end, per effect key: `once`/`irreversible` effects were delivered
  at most once, every committed effect was delivered, every delivery has a
  committed row, no effect is left in `intent`, and every item is done.

    run      the rounds: start everything, drive each task to an end, inject faults
    pool     the worker processes it kills and restarts
    slow     the slow-worker faults: pause, stall, drop (ops/faultproxy.py), gateway (ops/gateway.py)
    checks   the sandbox's deliveries against the ledger
    report   the counts and the table
"""
