"""Compile generated CUDA C++ as C++17 against cuda_emu.h and run it on the CPU, on the MSL
emulator's runtime and with its checks (tests/msl_emu, docs/msl-subset.md "The CUDA subset").

``Emulator()`` is the MSL emulator's (tests/msl_emu/driver.py) with this directory's header and
translate(): compile flags, the object cache (by hash: ``$MSL_EMU_CACHE``), the runtime (one object
for both languages), ``run()`` with its fiber orders, ftz and multiply-accumulate models, and
EmuError are shared. A block is a threadgroup; ``run(kernel, grid, block, buffers, readonly)``.

What the driver does to the source (the rest is cuda_emu.h's work):
- reads the one ``[extern "C"] __global__ [__launch_bounds__(n)] void name(...)`` signature (the
  bounds are ignored; cuda_emu.h defines the keyword away): pointer parameters are bound
  to the buffers in order; a scalar parameter ``T x`` reads a one-element buffer;
- removes the definition of ``tg_mma_m16n8k16_bf16`` (the tc route's inline PTX), from its line to
  its closing brace, leaving the line breaks so line numbers hold; cuda_emu.h supplies it;
- blanks ``#pragma unroll [n]`` lines (a hint; g++ would warn about the unknown pragma);
- rewrites ``__shared__ T name[N]...;`` at kernel scope to ``MSL_EMU_THREADGROUP(T, name, [N]...)``;
- puts ``#include "cuda_emu.h"`` and ``#line 1 "<name>.cu"`` first, so barrier and collective
  sites, and compiler errors, carry the line numbers of the CUDA text.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MSL_DRIVER = HERE.parent / "msl_emu" / "driver.py"
MMA_FUNCTION = "tg_mma_m16n8k16_bf16"


def _msl_driver() -> Any:
    """tests/msl_emu/driver.py, loaded by path (this file may itself be loaded by path)."""
    name = "_cuda_emu_msl_driver"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MSL_DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while the class body runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


_msl = _msl_driver()
CompileError = _msl.CompileError
EmuError = _msl.EmuError
find_cxx = _msl.find_cxx
Kernel = _msl.Kernel
ORDERS = _msl.ORDERS
MMA_ORDERS = _msl.MMA_ORDERS


class SubsetError(_msl.SubsetError):
    """The source is outside the CUDA subset the emulator accepts (docs/msl-subset.md)."""


_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s+)?"
_SIGNATURE = re.compile(r'(?:\bextern\s+"C"\s+)?\b__global__\s+' + _BOUNDS + r"void\s+" + _BOUNDS +
                        r"(\w+)\s*\((.*?)\)\s*\{", re.S)
_PARAM = re.compile(r"^(.*?[\s*&])(\w+)$", re.S)
_SHARED = re.compile(r"^(\s+)__shared__\s+(\w+)\s+(\w+)\s*((?:\[\s*\d+\s*\])+)\s*;", re.M)
_PRAGMA_UNROLL = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", re.M)
_MMA_DEFINITION = re.compile(r"^[^\n;]*\b" + MMA_FUNCTION + r"\s*\([^;{]*\)\s*\{", re.M)


def parse_signature(source: str) -> tuple[str, list[tuple[str, str]]]:
    """(kernel name, [(type, name)] of its parameters)."""
    found = _SIGNATURE.findall(source)
    if len(found) != 1:
        raise SubsetError(f"expected exactly one `__global__ void name(...)`, found {len(found)}")
    name, params_text = found[0]
    params = []
    for raw in params_text.split(",") if params_text.strip() else []:
        text = " ".join(raw.split())
        m = _PARAM.match(text)
        if not m or "&" in m.group(1) or "[" in text:
            raise SubsetError(f"kernel parameter {text!r}: a pointer or a scalar `T name` is expected")
        params.append((m.group(1).strip(), m.group(2)))
    return name, params


def _closing_brace(text: str, start: int) -> int:
    """Index of the brace closing the one at `start`, skipping string and character literals and
    comments (the PTX in an asm statement holds braces of its own)."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i + 2) + 2
            if i < 2:
                break
            continue
        if ch in "\"'":
            i += 1
            while i < len(text) and text[i] != ch:
                i += 2 if text[i] == "\\" else 1
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SubsetError(f"the definition of {MMA_FUNCTION} has no closing brace")


def remove_mma_definition(source: str) -> str:
    """The source without the definition of tg_mma_m16n8k16_bf16 (blank lines in its place)."""
    found = list(_MMA_DEFINITION.finditer(source))
    if len(found) > 1:
        raise SubsetError(f"{MMA_FUNCTION} is defined {len(found)} times")
    if not found:
        return source
    start, end = found[0].start(), _closing_brace(source, found[0].end() - 1) + 1
    return source[:start] + "\n" * source.count("\n", start, end) + source[end:]


def translate(source: str) -> tuple[str, str]:
    """(C++ translation unit, kernel name)."""
    name, params = parse_signature(source)
    body = _PRAGMA_UNROLL.sub("", remove_mma_definition(source))  # a hint; g++ warns on it
    body = _SHARED.sub(lambda m: f"{m.group(1)}MSL_EMU_THREADGROUP({m.group(2)}, {m.group(3)}, {m.group(4)});",
                       body)
    args = []
    for i, (type_, _) in enumerate(params):
        if type_.endswith("*"):
            args.append(f"({type_})msl_emu_buffers[{i}]")
        else:
            args.append(f"*({type_} *)msl_emu_buffers[{i}]")
    stub = (
        '#line 1 "msl_emu_entry"\n'
        'extern "C" void msl_emu_entry(void *const *msl_emu_buffers) {\n'
        "    msl_emu_set_entry_frame(__builtin_frame_address(0));\n"
        f"    {name}({', '.join(args)});\n"
        "}\n"
    )
    return f'#include "cuda_emu.h"\n#line 1 "{name}.cu"\n{body}\n{stub}', name


class Emulator(_msl.Emulator):  # type: ignore[misc, name-defined]
    """The MSL emulator, speaking CUDA C++: this directory's header and translate()."""

    HEADER_DIR = HERE
    HEADERS = ("cuda_emu.h",)

    def translate(self, source: str) -> tuple[str, str]:
        return translate(source)
