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
    helpdesk_faults: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

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
            ("unknown -> reviewed (needed a human)", self.reviewed),
            ("resumes", self.resumes),
            ("blocked duplicates", self.blocked),
            ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"),
            ("helpdesk faults", self.helpdesk_faults or "none"),
            ("wall time", f"{self.seconds:.1f} s"),
            ("result", "PASS" if self.ok else f"FAIL ({len(self.problems)} problem(s))"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        bar = "-" * max(len(line) for line in lines)
        return "\n".join([bar, *lines, bar])
