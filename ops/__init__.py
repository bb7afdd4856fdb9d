"""Operational tools: the kill test and the benchmarks; they drive the product from outside.

Nothing in the request or worker path imports them. A Django app only so that
`manage.py killtest` and `manage.py bench` find their commands here.

    processes   start, watch and stop child processes (also used by `make run`
                and the test suite's fixtures)
    killtest    "nothing twice, nothing lost" under SIGKILL (docs/reliability.md)
    bench       what durability costs, measured side by side (docs/benchmarks.md)
    samples     synthetic ticket batches for both
"""
