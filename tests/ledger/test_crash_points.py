"""Crash points: armed in a test they raise SimulatedCrash once; armed
through LEDGER_CRASH_AT a real process SIGKILLs itself there (with the
given probability) and first notes the window in the log file named after
its `@`."""

import os
import signal
import subprocess
import sys

import pytest

from ledger import faults
from ledger.faults import SimulatedCrash, arm, crash_point

from ..conftest import ROOT

PROCESS = """
from ledger.faults import crash_point
for window in ("before_intent", "after_intent", "after_call"):
    crash_point(window)
    print("passed", window, flush=True)
"""


class TestCrashPointsInATest:
    def test_an_armed_point_raises_as_many_times_as_armed(self):
        arm("after_call", times=2)
        crash_point("after_intent")
        for _ in range(2):
            with pytest.raises(SimulatedCrash, match="after_call"):
                crash_point("after_call")
        crash_point("after_call")

    def test_an_unknown_window_is_refused(self):
        with pytest.raises(ValueError, match="before_intent, after_intent, after_call, after_commit"):
            arm("after_lunch")

    def test_disarm_clears_every_point(self):
        arm("before_intent")
        faults.disarm()
        crash_point("before_intent")


class TestCrashPointsInAProcess:
    def test_the_process_kills_itself_at_the_armed_window_and_notes_it(self, tmp_path):
        log = tmp_path / "crashes.log"
        env = {**os.environ, "LEDGER_CRASH_AT": f" after_intent:0 , after_call @ {log}"}
        proc = subprocess.run([sys.executable, "-c", PROCESS], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert proc.stdout.splitlines() == ["passed before_intent", "passed after_intent"]
        assert log.read_text() == "after_call\n"

    def test_the_kill_is_a_sigkill_to_itself_after_the_note(self, tmp_path, monkeypatch):
        """The same path in this process, with the kill intercepted."""
        log = tmp_path / "crashes.log"
        monkeypatch.setenv("LEDGER_CRASH_AT", f"after_commit:1.0@{log}")
        kills = []

        def kill(pid, sig):
            kills.append((pid, sig, log.read_text()))
            raise SimulatedCrash("killed")

        monkeypatch.setattr(os, "kill", kill)
        crash_point("after_call")
        with pytest.raises(SimulatedCrash):
            crash_point("after_commit")
        assert kills == [(os.getpid(), signal.SIGKILL, "after_commit\n")]

    def test_without_a_log_the_process_still_dies(self, monkeypatch):
        monkeypatch.setenv("LEDGER_CRASH_AT", "before_intent")
        kills = []

        def kill(pid, sig):
            kills.append(sig)
            raise SimulatedCrash("killed")

        monkeypatch.setattr(os, "kill", kill)
        with pytest.raises(SimulatedCrash):
            crash_point("before_intent")
        assert kills == [signal.SIGKILL]
