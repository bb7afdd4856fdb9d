"""Benchmarks: what durability costs, measured side by side (`manage.py bench`).

`runner` runs the figures and renders the table, `naive` is the baseline RQ
job without ledger, checkpoints or events, `model_server` is a tiny
OpenAI-compatible server with a fixed latency. See docs/benchmarks.md.
"""
