"""`python -m tgrad bench --generate` end to end on a tiny model directory, tgrad alone (slow tier:
it starts child processes), and which peers it runs (core tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tgrad.models  # noqa: F401  (model_dirs reads tgrad.models)

from model_dirs import model_dir


@pytest.mark.slow
def test_the_generate_bench_reports_prefill_decode_bandwidth_and_memory(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "llama")
    out = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--model", str(path), "--no-peers",
                          "--gen-rounds", "2", "--gen-prompt", "5", "--gen-tokens", "3", "--threads", "1",
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, check=True).stdout
    assert "prompt 5, 3 new tokens, 2 rounds" in out
    assert "weights read per decoded token" in out
    row = next(line for line in out.splitlines() if line.startswith("tgrad "))
    numbers = [float(x) for x in row.replace("[", " ").replace("]", " ").replace(",", " ").replace("%", " ").split()[1:]]
    # tok/s [min, max], ms, tok/s [min, max], weights GB/s, % of the best read rate, % paired, MB
    assert len(numbers) == 11 and all(n > 0 for i, n in enumerate(numbers) if i not in (8, 9))
    assert numbers[8] >= 0 and numbers[9] >= 0  # a tiny model's share of the read rate may print as 0%
    assert "paired: the median of each round's decode" in out
    saved = json.loads((tmp_path / "out" / "generate.json").read_text())
    assert len(saved["runs"]["tgrad"]) == 2 and saved["weight_gb"] > 0 and saved["read_gbps"] > 0
    assert all(len(r["tokens"]) == 3 for r in saved["runs"]["tgrad"])


@pytest.mark.slow
def test_a_wrong_model_directory_is_a_typed_error_before_any_child(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--model", str(tmp_path / "none"), "--no-peers"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--model: FileMissingError" in out.stderr and "config.json" in out.stderr


def test_the_peers_are_those_installed_and_torch_compile_needs_a_compiler(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import importlib.util

    from tgrad.bench import generate

    def args() -> argparse.Namespace:
        return argparse.Namespace(no_peers=False, gen_no_compile=False)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name in ("torch", "transformers"))
    monkeypatch.setattr(generate.shutil, "which", lambda name: "/usr/bin/g++" if name == "g++" else None)
    assert generate._peers(args()) == ["tgrad", "transformers", "torch.compile"]
    assert generate._peers(argparse.Namespace(no_peers=False, gen_no_compile=True)) == ["tgrad", "transformers"]
    assert generate._peers(argparse.Namespace(no_peers=True, gen_no_compile=False)) == ["tgrad"]
    monkeypatch.setattr(generate.shutil, "which", lambda name: None)
    assert generate._peers(args()) == ["tgrad", "transformers"]
    assert "torch.compile peer skipped: no C++ compiler" in capsys.readouterr().out
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name in ("torch", "transformers", "llama_cpp", "gguf"))
    monkeypatch.setattr(generate.shutil, "which", lambda name: "/usr/bin/c++" if name == "c++" else None)
    assert generate._peers(args()) == ["tgrad", "transformers", "torch.compile", "llama.cpp"]
