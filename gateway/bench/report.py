"""How every `enclave bench ...` ends: one JSON document on stdout (and in --output)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def emit(report: dict[str, Any], load_before: float, output: Path | None) -> int:
    """Print ``report`` with the machine's load before and after the run: others' work on a
    shared machine shows in every number, so the document says how busy it was."""
    report["machine"]["load_average_1m"] = {
        "before": round(load_before, 2),
        "after": round(os.getloadavg()[0], 2),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if output:
        output.write_text(text + "\n")
    return 0
