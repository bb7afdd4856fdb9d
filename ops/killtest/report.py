"""The kill test's report: what happened in the rounds, and the table it prints."""

from collections import Counter
from dataclasses import dataclass, field

from ledger.faults import WINDOWS


@dataclass
class Report:
    rounds: int = 0
    items: int = 0
    kills: Counter = field(default_factory=Counter)
    committed: int = 0
    delivered: int = 0
    duplicates: int = 0
    lost_items: int = 0
    reconciled: int = 0
    reviewed: int = 0
    resumes: int = 0
    blocked: int = 0
    faults: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    worker_starts: Counter = field(default_factory=Counter)
    late_writes: int = 0  # deliveries that landed after their effect was already unknown
    landed_after_not_found: int = 0  # ... after a look-up said "not found": must be 0
    after_settled: int = 0  # deliveries that landed after the ledger had settled their effect
    helpdesk_faults: str = ""
    duplicate_keys: dict = field(default_factory=dict)  # key -> (task id, deliveries beyond the first)
    per_task: dict = field(default_factory=dict)  # task id -> Counter (lost, late, after settled, ...)
    round_faults: dict = field(default_factory=dict)  # task id -> the slow-worker fault of its round
    playbook: str = ""  # the playbook the tasks ran on (its rules and reply checks on)
    approvals: Counter = field(default_factory=Counter)  # approved / rejected by the harness playing the operator
    rehearsal_items: int = 0  # items of the rehearsals run beside the rounds: they must send nothing
    failed_items: int = 0  # items that failed on the way (a refusal; none may fail of a hiccup or a click)
    suspensions: int = 0  # tasks suspended on the way (the harness resumes them)
    operator: Counter = field(default_factory=Counter)  # the operator's clicks on Review (ops/killtest/operator.py)
    sweep_in_workers: bool = False  # no sweep process: the workers take turns at it
    sweep_takeovers: list = field(default_factory=list)  # seconds from killing the sweep's holder to a new holder
    sweep_takeovers_ready: list = field(default_factory=list)  # ... from when another worker could take it

    def count(self, task, what: str, n: int = 1) -> None:
        self.per_task.setdefault(str(task), Counter())[what] += n

    def per_fault(self) -> dict[str, Counter]:
        """What each round fault found: rounds, duplicates, late writes, lost items."""
        found: dict[str, Counter] = {}
        for task, kind in self.round_faults.items():
            found.setdefault(kind, Counter())["rounds"] += 1
            found[kind].update(self.per_task.get(str(task), Counter()))
        for task, extra in self.duplicate_keys.values():
            kind = self.round_faults.get(int(task)) if str(task).isdigit() else None
            if kind is not None:
                found[kind]["duplicates"] += extra
        return found

    @property
    def ok(self) -> bool:
        return not self.problems

    def _sweep_line(self) -> str:
        if not self.sweep_in_workers:
            return "a process of its own (recover --loop)"
        times = sorted(self.sweep_takeovers)
        if not times:
            return f"in the workers; its holder killed {len(times)} time(s), taken over after -"
        ready = sorted(self.sweep_takeovers_ready)
        line = (f"in the workers; its holder killed {len(times)} time(s), taken over after "
                f"{times[0]:.1f}-{times[-1]:.1f} s (median {times[len(times) // 2]:.1f} s; the longest: "
                f"{', '.join(f'{t:.1f}' for t in times[-5:][::-1])} s)")
        if ready:
            line += (f"; from when another worker was up, listening and awake: {ready[0]:.1f}-{ready[-1]:.1f} s "
                     f"(median {ready[len(ready) // 2]:.1f} s)")
        return line

    def table(self) -> str:
        kills = ", ".join(f"{w} {self.kills[w]}" for w in (*WINDOWS, "wall-clock")) or "none"
        rows = [
            ("rounds", self.rounds),
            ("kills per window", kills),
            ("worker starts", ", ".join(f"{k} {v}" for k, v in sorted(self.worker_starts.items())) or "none"),
            ("items", self.items),
            ("effects committed", self.committed),
            ("deliveries", self.delivered),
            ("duplicates (once/irreversible)", self.duplicates),
            ("lost items", self.lost_items),
            ("unknown -> reconciled", self.reconciled),
            ("late writes (caller had given up)", self.late_writes),
            ("... landed after a not-found look-up", self.landed_after_not_found),
            ("late writes after the ledger settled", self.after_settled),
            ("unknown -> reviewed (needed a human)", self.reviewed),
            ("approvals (played)", ", ".join(f"{k} {v}" for k, v in sorted(self.approvals.items())) or "none"),
            ("rehearsal items (send nothing)", self.rehearsal_items),
            ("resumes", self.resumes),
            ("items failed on the way", self.failed_items),
            ("tasks suspended on the way", self.suspensions),
            ("operator's clicks", ", ".join(f"{k} {v}" for k, v in sorted(self.operator.items())) or "none"),
            ("blocked duplicates", self.blocked),
            ("recovery sweep", self._sweep_line()),
            ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"),
            ("helpdesk faults", self.helpdesk_faults or "none"),
            ("playbook", self.playbook or "the shipped one"),
            ("wall time", f"{self.seconds:.1f} s"),
            ("result", "PASS" if self.ok else f"FAIL ({len(self.problems)} problem(s))"),
        ]
        for kind, found in sorted(self.per_fault().items()):
            rows.insert(-2, (f"round fault {kind}", ", ".join(
                f"{what} {found[what]}" for what in ("rounds", "duplicates", "after not found", "after settled",
                                                     "late", "lost"))))
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        bar = "-" * max(len(line) for line in lines)
        return "\n".join([bar, *lines, bar])
