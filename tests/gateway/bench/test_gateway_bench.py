"""`enclave bench gateway`, run small: both sides get the same load, and it says what it cost.

The gateway's CPU time is read from /proc: the appliance and its CI run on Linux.
"""

from __future__ import annotations

import json
from pathlib import Path

from gateway.cli import main


def test_a_small_run_reports_both_sides_and_the_gateways_cpu(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    argv = ["bench", "gateway", "--concurrency", "2", "--requests", "6", "--chunks", "3"]
    assert main([*argv, "--interval-ms", "2", "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["direct"]["statuses"] == report["gateway"]["statuses"] == {"200": 12}
    assert report["added_ms"]["measured_on"] == "first event"
    assert report["gateway"]["cpu_ms_per_request"] > 0
    assert set(report["machine"]["load_average_1m"]) == {"before", "after"}
