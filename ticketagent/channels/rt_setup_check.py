"""What an RT data file relies on, looked up in RT through REST2 before `manage.py rt-setup` writes the file.

The users and queues it names (`rt_setup.setup_needs`) must exist, enabled;
the data file creates none of them. Read as the agent's RT user
(HELPDESK_USER), which sees any user (it must be Privileged) but, before
the data file has granted it SeeQueue, no queue: REST2 answers 403 alike for
a queue it may not see and one that does not exist. Such a queue is
reported as not verified from here; the data file checks it again inside
RT, where everything is visible, before it changes anything.
"""

from urllib.parse import quote

from ledger.channels.redact import redact
from ticketagent.channels.rt_check import reach_problem
from ticketagent.channels.rt_rest import SYSTEM, Reader, RTConfig, Unanswered, answered_by
from ticketagent.channels.rt_setup import Needed


def setup_check(config: RTConfig, needs: list[Needed], *, reader: Reader | None = None
                ) -> tuple[list[str], list[str]]:
    """(problems, not verified): what RT lacks of `needs`, each naming where it is configured, and what
    the agent's user cannot see yet. Writes nothing; every text redacted."""
    reader = reader or Reader(config)
    problems: list[str] = []
    unverified: list[str] = []
    try:
        problem = reach_problem(config, reader)
        if problem:
            return [redact(f"cannot check what the data file relies on: {problem}")], []
        for need in needs:
            _look_up(config, reader, need, problems, unverified)
    except Unanswered as exc:
        problems.append(f"{SYSTEM} did not answer the check in full: {exc}")
    return [redact(p) for p in problems], [redact(u) for u in unverified]


def _look_up(config: RTConfig, reader: Reader, need: Needed, problems: list[str], unverified: list[str]) -> None:
    answer = reader.get(f"/{need.kind}/{quote(need.name, safe='')}")
    data = answer.json(None)
    if answer.status == 404:
        problems.append(need.missing())
    elif answer.status == 200 and isinstance(data, dict):
        if str(data.get("Disabled") or "0") not in ("0", ""):
            problems.append(need.missing("is disabled in RT"))
    elif answer.status == 403 and need.kind == "queue":
        unverified.append(f"{need.what} {need.name!r} ({need.where}): {config.user!r} may not see it yet (no "
                          "SeeQueue there), so whether it exists is checked by the data file when applied")
    else:
        problems.append(f"{need.what} {need.name!r} ({need.where}): "
                        f"{answered_by(answer, f'GET /{need.kind}/{need.name}')}")
