"""`python -m ops bench --profile`: cProfile reports of a section, or of the pipeline run in this process."""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from django.db import transaction
from django.test import override_settings

from ops.samples import ticket_rows

if TYPE_CHECKING:
    from ops.bench.runner import Bench


@contextlib.contextmanager
def profiled(enabled: bool, path: Path, log: Callable[[str], None], title: str):
    if not enabled:
        yield
        return
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text).strip_dirs().sort_stats("cumulative")
        stats.print_stats(40)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.getvalue())
        stats.dump_stats(str(path.with_suffix(".prof")))
        log(f"  profile of {title}: {path}")


def profile_section(bench: Bench, section: str, title: str):
    """`profiled()` for a section, on when `--profile` names it."""
    return profiled(section in bench.profile, bench.profile_dir / f"profile-{section}.txt", bench.log, title)


def profile_pipeline(bench: Bench, name: str = "pipeline", title: str = "the durable pipeline") -> None:
    """cProfile of the durable pipeline in this process (the configured
    model -- offline unless a caller set one --, real sandbox)."""
    from ticketagent.llm.clients import get_model_client
    from ticketagent.models import Item
    from ticketagent.pipeline.run import item_process
    from ticketagent.services.tasks import task_create

    get_model_client()  # built once per process (and the SDK imported): not the items' cost
    n = max(bench.sizes.overhead_items // 4, 5)
    rows = ticket_rows(n, "P", bench.rng)
    with transaction.atomic():
        task = task_create(rows=rows, name="bench profile", allow_auto_close=True, failure_threshold=n + 1)
    # task_create enqueued them; no worker runs now, so run them here
    with profiled(True, bench.profile_dir / f"profile-{name}.txt", bench.log, title):
        for item in Item.objects.filter(task=task).order_by("pk"):
            item_process(item_id=item.pk, attempt=item.attempt)
    bench.flush_redis()


def profile_sdk_pipeline(bench: Bench) -> None:
    """`--profile latency`: the same, with the real OpenAI SDK against the
    model server answering at once -- what a worker spends on an item
    besides waiting for the model."""
    server, base_url = bench.procs.start_model_server(0.0)
    try:
        with override_settings(OPENAI_API_KEY="bench-key", OPENAI_BASE_URL=base_url, OPENAI_MAX_RETRIES=0):
            profile_pipeline(bench, "latency", "the durable pipeline with the OpenAI SDK (model answering at once)")
    finally:
        bench.procs.stop_other(server)
