"""Benchmarks: what durability costs, measured side by side (`python -m ops bench`). See docs/benchmarks.md.

    runner        one run: what the sections share, the sections in order
    overhead      figure 1: the durable pipeline vs `naive`, the same work without durability
    gate          figure 2: the gate vs two bare writes
    latency       figure 3: against `ops.fake_model`, the fake OpenAI-compatible server, at a fixed latency
    dashboard     figure 4: the pages over the `dataset`
    dryrun, replay, kill    figure 5
    sizes, results, machine, children, workload, profiling    what the sections share
"""
