"""Start-up phases: each phase's own time (nested ones taken out), totals, the ready line."""

from __future__ import annotations

import json
import logging

import pytest

from inference import startup
from inference.startup import READY_MARK, StartupPhases, process_age_s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nested_phases_count_their_own_time_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    monkeypatch.setattr(startup.time, "perf_counter", clock)
    phases = StartupPhases()
    with caplog.at_level(logging.INFO, logger="inference.startup"):
        with phases.phase("engine"):
            clock.now += 1.0
            with phases.phase("kernels"):
                clock.now += 2.0
            clock.now += 0.5
            with phases.phase("kernels"):
                clock.now += 0.25
        phases.add("interpreter", 0.75, quiet=True)
        phases.log_ready()
    assert phases.snapshot() == {"kernels": 2.25, "engine": 1.5, "interpreter": 0.75}
    assert "start-up: kernels took 2.000 s" in caplog.text
    assert "interpreter took" not in caplog.text  # quiet
    line = next(r.getMessage() for r in caplog.records if READY_MARK in r.getMessage())
    summary = json.loads(line.partition(READY_MARK)[2])
    assert summary["engine"] == 1.5 and summary["kernels"] == 2.25
    assert summary["ready_s"] is None or summary["ready_s"] >= 0


def test_a_phase_that_raises_is_still_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(startup.time, "perf_counter", clock)
    phases = StartupPhases()
    with pytest.raises(ValueError), phases.phase("weights"):
        clock.now += 3.0
        raise ValueError("bad file")
    assert phases.snapshot() == {"weights": 3.0}


def test_process_age_is_known_on_linux() -> None:
    age = process_age_s()
    assert age is not None and 0 < age < 24 * 3600
