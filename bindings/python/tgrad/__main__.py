"""Command line: ``python -m tgrad <command>``.

``python -m tgrad --version`` prints the package's version and the loaded libtgrad's.
Commands: ``bench`` (bytes against the oracle, live timing against peers; see tgrad.bench),
``config`` (where the installed library, header and pkg-config file are, for C users),
``render`` (the GPU kernel source libtgrad generates for a shape; see tgrad.render),
``capabilities`` (libtgrad's capability table; ``--markdown`` writes docs/capabilities.md),
``doctor`` (versions, backends, CPU variant, threads, peak, capabilities, scorecards; see
tgrad.doctor), ``safetensors-stub`` (Protocol classes naming a checkpoint's tensors, for type
checkers; see tgrad.safetensors), ``generate`` (decode from a Hugging Face Llama-family
directory; see tgrad.models.cli).
Exit status: 0 success, 1 a check failed, 2 bad command-line input, 141 the reader of the output
went away (``python -m tgrad render ... | head -3``; 128 + SIGPIPE, as a shell reports a process
that signal ended), quietly.
"""

from __future__ import annotations

import argparse
import os
import sys

#: Exit status when the reader of stdout goes away: 128 + SIGPIPE, what a shell reports for a
#: process that signal ended (Python ignores SIGPIPE, so writes raise BrokenPipeError instead).
BROKEN_PIPE_STATUS = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tgrad",
                                     description="tgrad command-line tools")
    # Not argparse's "version" action: it wraps the text to the terminal's width, mid-path.
    parser.add_argument("--version", action="store_true",
                        help="print the package's version and the loaded libtgrad's, and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import bench

    bench.add_arguments(commands.add_parser(
        "bench", help="check bytes against the oracle and time matmul against live peers",
        description=(bench.__doc__ or "").split("\n\n")[0]))
    config = commands.add_parser(
        "config", help="print where the installed libtgrad, tgrad.h and tgrad.pc are",
        description="Paths of the copy of libtgrad this package loads, for C users: "
                    "PKG_CONFIG_PATH=$(python -m tgrad config --pkgconfig-dir)")
    which = config.add_mutually_exclusive_group()
    for flag in ("--pkgconfig-dir", "--include-dir", "--library"):
        which.add_argument(flag, action="store_true")
    config.set_defaults(func=_config)
    from . import render

    render.add_arguments(commands.add_parser(
        "render", help="print the GPU kernel libtgrad generates for a shape, and its launch geometry",
        description=(render.__doc__ or "").split("\n\n")[0]))
    from . import doctor, introspect

    introspect.add_arguments(commands.add_parser(
        "capabilities", help="print libtgrad's capability table (--markdown: docs/capabilities.md)",
        description="The capability table of the loaded libtgrad, one row per backend and "
                    "capability."))
    doctor.add_arguments(commands.add_parser(
        "doctor", help="check this installation: versions, backends, CPU, capabilities, scorecards",
        description=(doctor.__doc__ or "").split("\n\n")[0]))
    from . import safetensors

    safetensors.add_arguments(commands.add_parser(
        "safetensors-stub", help="print a .pyi naming a checkpoint's tensors (python -m tgrad safetensors-stub ckpt/ > model.pyi)",
        description="Protocol classes for the tensor names of a .safetensors file, sharded directory or index."))
    from .models import cli as models_cli

    models_cli.add_arguments(commands.add_parser(
        "generate", help="decode from a Hugging Face Llama, Mistral or Qwen2 directory (tgrad.models)",
        description=(models_cli.__doc__ or "").split("\n\n")[0]))
    return parser


def _version_text() -> str:
    """``tgrad 0.2.0 (libtgrad 0.2.0 at PATH)``: the package, then the library it loaded (another
    one when TGRAD_LIB points at it)."""
    import tgrad

    return f"tgrad {tgrad.__version__} (libtgrad {tgrad.version()} at {tgrad.library_path()})"


def _config(args: argparse.Namespace) -> int:
    import tgrad

    paths = {"library": tgrad.library_path(), "include_dir": tgrad.include_dir(),
             "pkgconfig_dir": tgrad.pkgconfig_dir()}
    chosen = [key for key in paths if getattr(args, key)]
    if chosen:
        print(paths[chosen[0]])
    else:
        for key, value in paths.items():
            print(f"{key}: {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()  # a reader that left shows up here at the latest, not at exit
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE_STATUS


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version_text())
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


def _discard_stdout() -> None:
    """Point stdout at the null device: what is still buffered for the reader that left would
    fail again when the interpreter flushes it at exit, with a traceback on stderr."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a file (captured): nothing flushes at exit
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


if __name__ == "__main__":
    sys.exit(main())
