"""``python -m tgrad bench``: output contract, byte check, exit statuses."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys


import pytest

import tgrad  # noqa: E402,F401  (a missing binding is a failure, not a skip)

FIRST_KEYS = ["py_shape", "py_dtype", "py_byte_match", "py_pipeline_ok", "py_median_s", "py_gflops"]


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # The environment (TGRAD_LIB, PYTHONPATH) passes through unchanged.
    return subprocess.run([sys.executable, "-m", "tgrad", "bench", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def parse(stdout: str) -> list[dict[str, str]]:
    """Blocks of 'key: value' lines separated by blank lines, one per shape, keys in order."""
    blocks: list[dict[str, str]] = []
    for chunk in stdout.strip().split("\n\n"):
        block: dict[str, str] = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(": ")
            assert sep, f"not a 'key: value' line: {line!r}"
            block[key] = value
        blocks.append(block)
    return blocks


@pytest.mark.parametrize("shape", ["64x64x64", "127x255x511"])
def test_bench_bytes_match_the_oracle(shape):
    proc = bench("--shape", shape, "--repeat", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert list(block)[:6] == FIRST_KEYS
    assert block["py_shape"] == shape
    assert block["py_dtype"] == "bf16"
    assert block["py_byte_match"] == "true"
    assert block["py_pipeline_ok"] == "true"
    assert float(block["py_median_s"]) > 0 and float(block["py_gflops"]) > 0
    assert float(block["py_call_median_s"]) > 0
    assert "peer_numpy_f32_median_s" in block
    match = re.fullmatch(r"(\S+) \[(\S+), (\S+)\] (win|loss|tie)", block["ratio_numpy_f32"])
    assert match, block["ratio_numpy_f32"]
    value, lo, hi = (float(match.group(i)) for i in (1, 2, 3))
    verdict = match.group(4)
    assert 0 < lo <= hi and value > 0
    assert verdict == ("win" if lo > 1 else "loss" if hi < 1 else "tie")


def test_bench_empty_shape_works():
    proc = bench("--shape", "0x5x3", "--repeat", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = parse(proc.stdout)
    assert block["py_byte_match"] == "true" and block["py_pipeline_ok"] == "true"


def test_bench_several_shapes_and_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = bench("--shape", "4x4x4", "--shape", "4x0x3", "--repeat", "4", "--threads", "1",
                 "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blocks = parse(proc.stdout)
    assert [b["py_shape"] for b in blocks] == ["4x4x4", "4x0x3"]
    assert all(b["py_threads"] == "1" for b in blocks)
    report = json.loads(out.read_text())
    first = report["results"][0]
    assert first["byte_match"] is True and first["repeat"] == 4
    assert len(first["samples"]["tgrad"]) == 4 == len(first["samples"]["numpy_f32"])
    assert math.isclose(first["median_s"], statistics.median(first["samples"]["tgrad"]))


def test_bench_skips_the_oracle_above_its_limit_only():
    proc = bench("--shape", "1x1x1", "--repeat", "2", "--no-peers")
    assert parse(proc.stdout)[0]["py_byte_match"] == "true"
    from tgrad import bench as bench_module

    assert bench_module.ORACLE_LIMIT_MACS >= 1024**3  # 1024^3 is always checked


@pytest.mark.parametrize("bad", ["12x", "x", "1x2", "1x2x3x4", "-1x2x3", "axbxc", "1.5x2x3"])
def test_bench_bad_shape_is_a_usage_error(bad):
    proc = bench(f"--shape={bad}")
    assert proc.returncode == 2
    assert "invalid shape" in proc.stderr and "MxKxN" in proc.stderr


def test_bench_only_accepts_bf16():
    proc = bench("--shape", "4x4x4", "--dtype", "f32")
    assert proc.returncode == 2
    assert "bf16" in proc.stderr


def test_bench_needs_a_shape_and_a_command():
    assert bench().returncode == 2
    proc = subprocess.run([sys.executable, "-m", "tgrad"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert proc.returncode == 2 and "bench" in proc.stderr


def test_bench_module_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tgrad.bench as b\n"
            "assert b._torch() is None\n"
            "r = b.run_shape((8, 8, 8), repeat=3)\n"
            "assert r['byte_match'] is True and 'torch_bf16' not in r['peers']\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
