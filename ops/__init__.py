"""Operational tools: the kill test and the benchmarks; they drive the product from outside.

Nothing in the request or worker path imports them, and the product's
settings do not install them: `python -m ops killtest` and `python -m ops
bench` run on `ops.settings` (the product's, plus this app).

    processes   start, watch and stop child processes (also used by `make run`
                and the test suite's fixtures)
    killtest    "nothing twice, nothing lost" under SIGKILL (docs/reliability.md)
    bench       what durability costs, measured side by side (docs/benchmarks.md)
    samples     synthetic ticket batches for both
"""
