"""Every command's --help renders: argparse expands %-formats in help strings, so a stray
'%' (say, a percentage in an f-string) makes `python -m tgrad bench --help` raise instead of
printing the options."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tgrad.__main__ import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


COMMANDS = sorted(_subcommands(build_parser()))


def test_the_command_list_is_found() -> None:
    assert {"bench", "doctor", "render", "config"} <= set(COMMANDS)


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_renders(command: str | None) -> None:
    parser = build_parser()
    if command is not None:
        parser = _subcommands(parser)[command]
    text = parser.format_help()
    assert text.startswith("usage: python -m tgrad")
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in text


@pytest.mark.slow
def test_bench_help_through_the_module() -> None:
    run = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "--wait-quiet" in run.stdout and "% of the CPUs" in run.stdout
