"""`python -m tgrad bench --generate` end to end on a tiny model directory, tgrad alone (slow tier:
it starts child processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tgrad.models  # noqa: F401  (model_dirs reads tgrad.models)

from model_dirs import model_dir


@pytest.mark.slow
def test_the_generate_bench_reports_prefill_decode_and_memory(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "llama")
    out = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--generate", "--gen-model", str(path), "--no-peers",
                          "--gen-rounds", "2", "--gen-prompt", "5", "--gen-tokens", "3", "--threads", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert "prompt 5, 3 new tokens, 2 rounds" in out
    row = next(line for line in out.splitlines() if line.startswith("tgrad "))
    numbers = [float(x) for x in row.replace("[", " ").replace("]", " ").replace(",", " ").split()[1:]]
    assert len(numbers) == 8 and all(n > 0 for n in numbers)  # tok/s [min, max], ms, tok/s [min, max], MB
