"""The GPU profilers behind reference/h200-fast-decode, rehearsed on CPU (the floor is a rule now: tests/test_floor.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "gpu"


def test_decode_step_script_runs_tiny_on_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(TOOLS / "decode_step_h200.py"), "--tiny", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "decode_step_h200.json").read_text())
    assert [row["decode_batch"] for row in record["rows"]] == [1, 4]
    assert all(row["eager_step_s"] > 0 for row in record["rows"])
