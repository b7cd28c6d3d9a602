"""Every command of `python -m tgrad` exits quietly when the reader of its output goes away
(`python -m tgrad render ... | head -3`): exit status 141 (as a shell reports a process ended by
SIGPIPE), nothing on stderr, no BrokenPipeError traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tgrad.__main__ import build_parser

from model_dirs import model_dir
from test_cli_help import _subcommands

pytestmark = pytest.mark.slow  # a child process per command

#: Status of a command whose reader went away: 128 + SIGPIPE (13), as a shell reports it.
BROKEN_PIPE = 141


def _checkpoint(path: Path, tensors: int) -> Path:
    """A .safetensors file of `tensors` empty BF16 tensors (its stub grows with the count)."""
    header = {f"block{i}.weight": {"dtype": "BF16", "shape": [0], "data_offsets": [0, 0]} for i in range(tensors)}
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    return path


#: A fast invocation of each command, printing to stdout (CKPT: a small checkpoint file; MODEL: a
#: tiny model directory). argparse
#: prints --help itself and drops what it cannot write: that exits 0, as quietly.
INVOCATIONS: list[tuple[str | None, list[str]]] = [
    ("bench", ["bench", "--list"]),
    ("capabilities", ["capabilities"]),
    ("config", ["config"]),
    ("doctor", ["doctor", "--no-peak", "--json"]),
    ("generate", ["generate", "MODEL", "--ids", "1,2,3", "--max-new-tokens", "2"]),
    ("render", ["render", "--shape", "64x64x64"]),
    ("safetensors-stub", ["safetensors-stub", "CKPT"]),
    (None, ["--help"]),
]


def test_every_command_has_a_pipe_case() -> None:
    assert set(_subcommands(build_parser())) == {command for command, _ in INVOCATIONS} - {None}


def _with_reader_gone(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `python -m tgrad ARGS` with stdout a pipe whose read end is closed before it starts:
    its first write meets a reader that went away, on every run."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "tgrad", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [args for _, args in INVOCATIONS], ids=" ".join)
def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path, args: list[str]) -> None:
    given = {"CKPT": str(_checkpoint(tmp_path / "c.safetensors", 3))}
    if "MODEL" in args:
        given["MODEL"] = str(model_dir(tmp_path / "model"))
    run = _with_reader_gone([given.get(arg, arg) for arg in args])
    assert run.stderr == "" and run.returncode == (0 if "--help" in args else BROKEN_PIPE), run.stderr


def test_a_reader_that_leaves_after_three_lines_ends_the_command_quietly(tmp_path: Path) -> None:
    # A stub of about 260 KB: far more than a pipe buffers, so the command is still writing when
    # the reader leaves, as with `python -m tgrad safetensors-stub ckpt | head -3`. CPython may
    # end that one large write short without an error (then the status is 0): quiet either way.
    ckpt = _checkpoint(tmp_path / "big.safetensors", 12_000)
    proc = subprocess.Popen([sys.executable, "-m", "tgrad", "safetensors-stub", str(ckpt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=300) in (0, BROKEN_PIPE) and stderr == "", stderr
    assert lines[0].startswith('"""Names and shapes of big.safetensors')
