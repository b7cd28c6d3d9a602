"""Misuse of every exported function: NULL for each pointer argument, released, stale, forged and
wrong-kind handles. Each must come back as a status (or a documented sentinel), never a crash.
The list of functions is read from the cdef, which test_cdef keeps equal to tgrad.h, so a new
function cannot skip this test: it needs an entry in EXEMPT or gets the sweep."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad._ffi import ffi, lib

# Functions that take no handle or pointer to check, or return a value rather than a status.
EXEMPT = {
    "tgrad_version": "no arguments",
    "tgrad_version_string": "no arguments",
    "tgrad_check_version": "integer argument only (tested in test_cdef)",
    "tgrad_status_count": "no arguments",
    "tgrad_status_name": "total over all codes (tested in test_errors)",
    "tgrad_status_message": "total over all codes (tested in test_errors)",
    "tgrad_status_category": "total over all codes (tested in test_errors)",
    "tgrad_op_count": "no arguments",
    "tgrad_op_name": "total over all codes: 'unknown_op' outside the registry (tested in test_op_registry)",
    "tgrad_op_arity": "total over all codes: 0 outside the registry (tested in test_op_registry)",
    "tgrad_reduce_name": "total over all codes: 'unknown_reduce' outside the registry (tested in test_reductions)",
    "tgrad_softmax_name": "total over all codes: 'unknown_softmax' outside the registry (tested in test_softmax)",
    "tgrad_dtype_size": "total over all codes: 0 outside the dtypes (tested in test_reductions)",
    "tgrad_random_name": "total over all codes: 'unknown_random' outside the registry (tested in test_random.c)",
    "tgrad_matmul_order_kernel": "total over all codes: NULL outside the orders (tested in test_block32.c)",
    "tgrad_last_error": "no arguments",
    "tgrad_last_status": "no arguments",
    "tgrad_num_threads": "no arguments",
    "tgrad_live_tensors": "no arguments",
    "tgrad_live_buffers": "no arguments",
    "tgrad_live_bytes": "no arguments",
    "tgrad_cached_bytes": "no arguments",
    "tgrad_memory_limit": "no arguments",
    "tgrad_set_memory_limit": "integer argument only (tested in test_memory_limit)",
    "tgrad_cpu_scratch_bytes": "no arguments",
    "tgrad_release_cached": "no arguments",
    "tgrad_cpu_isa": "no arguments",
    "tgrad_cpu_stream_isa": "no arguments",
    "tgrad_cpu_isa_forced": "no arguments",
    "tgrad_cpu_isa_reason": "no arguments",
    "tgrad_cpu_isa_name": "returns NULL past the end; NULL available allowed (tested below)",
    "tgrad_matmul_order_kernel": "integer argument only: NULL outside the orders (tests/c/test_block32.c)",
    "tgrad_route_name": "returns NULL for unknown codes (tested with the generator)",
    "tgrad_lang_name": "returns NULL for unknown codes (tested with the generator)",
    "tgrad_tensor_release": "0 is a no-op; stale handles tested below",
    "tgrad_program_release": "NULL is a no-op; returns nothing (tests/python/test_program.py)",
}


def _const_pointer_params() -> set[tuple[str, int]]:
    """(function, argument index) of every pointer-to-const parameter, read from the cdef with
    pycparser (cffi's types drop const)."""
    import pycparser
    from pycparser import c_ast

    from tgrad._cdef import CDEF

    lines = [line for line in CDEF.splitlines() if not line.lstrip().startswith("#")]
    prelude = "typedef int int32_t; typedef long int64_t; typedef unsigned long uint64_t; " \
              "typedef unsigned int uint32_t; typedef unsigned short uint16_t; typedef unsigned long size_t;\n"
    ast = pycparser.CParser().parse(prelude + "\n".join(lines).replace("...", "0"))
    found = set()
    for node in ast.ext:
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl) and node.type.args:
            for i, param in enumerate(node.type.args.params):
                t = getattr(param, "type", None)
                if isinstance(t, c_ast.PtrDecl) and "const" in getattr(t.type, "quals", []):
                    found.add((node.name, i))
    return found


CONST_POINTERS = _const_pointer_params()


def _functions() -> list[str]:
    return sorted(name for name in dir(lib) if name.startswith("tgrad_") and callable(getattr(lib, name)))


def _signature(name: str) -> Any:
    return ffi.typeof(getattr(lib, name))


def _make_args(name: str, handle: int, null_index: int | None) -> list[Any]:
    """Valid-looking arguments for `name`, with the pointer at null_index made NULL."""
    args: list[Any] = []
    keep: list[Any] = []
    for i, t in enumerate(_signature(name).args):
        if t.kind == "function":  # a callback: none
            args.append(ffi.NULL)
            continue
        if t.kind == "pointer":
            if i == null_index:
                args.append(ffi.NULL)
                continue
            target = t.item
            if target.cname == "void" or (target.kind == "struct" and target.fields is None):
                args.append(ffi.NULL)  # an opaque context pointer, or an opaque object (tgrad_program)
                continue
            if target.kind == "primitive" and target.cname == "char":
                obj = ffi.new("char[]", b"auto" + bytes(252))
            elif target.kind == "struct":
                obj = ffi.new(t)
                if any(name == "size" for name, _ in target.fields):  # a sized struct: state its size
                    obj.size = ffi.sizeof(target)
            else:
                obj = ffi.new(f"{target.cname}[]", 16)
            keep.append(obj)
            args.append(obj)
        elif t.cname == "tgrad_tensor_t" or t.cname == "uint64_t":
            args.append(handle)
        elif t.cname in ("size_t",):
            args.append(256)
        else:
            args.append(1 if "int" in t.cname else 0)
    args.append(keep)  # keeps the buffers alive; stripped by the caller
    return args


def _call(name: str, args: list[Any]) -> Any:
    isa = tgrad._cpu_isa_setting()  # the sweep's "auto" must not replace a forced variant
    result = getattr(lib, name)(*args[:-1])
    if name == "tgrad_debug_fail_allocation":  # a fault-injection build was armed: disarm it
        lib.tgrad_debug_fail_allocation(0, ffi.NULL)
    if name == "tgrad_debug_cpu_blocking":  # back to the automatic CPU blocking
        lib.tgrad_debug_cpu_blocking(0, 0, 0)
    if name == "tgrad_debug_cpu_isa_rates":  # back to the rule's own rates
        lib.tgrad_debug_cpu_isa_rates(ffi.NULL, 0)
    if name == "tgrad_debug_cpu_identity":  # back to the CPU's own identity
        lib.tgrad_debug_cpu_identity(ffi.NULL, 0)
    if name in ("tgrad_set_cpu_isa", "tgrad_debug_cpu_isa_rates", "tgrad_debug_cpu_identity"):
        tgrad.set_cpu_isa(isa)
    if result == 0:  # a call that succeeded may have made tensors: release them
        for i, t in enumerate(_signature(name).args):
            if t.kind == "pointer" and t.item.cname == "uint64_t" and (name, i) not in CONST_POINTERS:
                if args[i] != ffi.NULL and args[i][0]:
                    lib.tgrad_tensor_release(args[i][0])
    return result


# Non-const pointers that may be NULL: the failure count of the fault-injection aid is optional,
# and a deleter's context is the caller's opaque value.
NULL_OUTPUT_ALLOWED = {("tgrad_debug_fail_allocation", 1), ("tgrad_tensor_from_external", 6)}
# tgrad_program_info fills whichever counts it is given; the NULL program is refused
NULL_OUTPUT_ALLOWED |= {("tgrad_program_info", i) for i in range(1, 5)}


def _status_functions() -> list[str]:
    out = []
    for name in _functions():
        if name in EXEMPT:
            continue
        sig = _signature(name)
        assert sig.result.cname in ("tgrad_status", "int32_t"), f"{name}: add it to EXEMPT or make it return a status"
        out.append(name)
    return out


# Functions whose uint64_t arguments are values, not tensor handles.
NOT_HANDLES = {"tgrad_random": "seed and offset are 64-bit values (refusals: tests/c/test_random.c)"}


def _handle_params(name: str) -> bool:
    # cffi resolves the typedef: a uint64_t passed by value is a tensor handle in this ABI
    return name not in NOT_HANDLES and any(t.cname == "uint64_t" for t in _signature(name).args)


HANDLE_FUNCTIONS = [n for n in _status_functions() if _handle_params(n)]


def test_the_sweeps_see_the_api() -> None:
    assert len(HANDLE_FUNCTIONS) >= 20 and len(CONST_POINTERS) >= 8


@pytest.fixture()
def live_handle() -> Any:
    t = tgrad.Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    yield t
    t.release()


@pytest.mark.parametrize("name", _status_functions())
def test_every_function_refuses_null_pointers(name: str, live_handle: Any) -> None:
    sig = _signature(name)
    for i, t in enumerate(sig.args):
        if t.kind != "pointer":
            continue
        status = _call(name, _make_args(name, live_handle._handle, i))
        # NULL input data may be legitimate (an empty shape needs none); a NULL output pointer
        # is refused, with a status, never written through
        if (name, i) not in CONST_POINTERS and (name, i) not in NULL_OUTPUT_ALLOWED:
            assert status != 0, f"{name} accepted NULL for argument {i} ({t.cname})"


@pytest.mark.parametrize("name", HANDLE_FUNCTIONS)
@pytest.mark.parametrize("kind", ["zero", "forged", "wrong_kind", "released", "stale"])
def test_every_function_refuses_bad_handles(name: str, kind: str, live_handle: Any) -> None:
    if kind == "zero":
        handle = 0
    elif kind == "forged":
        handle = 0x1234
    elif kind == "wrong_kind":
        handle = (live_handle._handle & 0x00FFFFFFFFFFFFFF) | (2 << 56)
    else:
        t = tgrad.Tensor.from_numpy(np.zeros((2, 2), np.float32))
        handle = t._handle
        t.release()
        if kind == "stale":  # the slot is reused by a new tensor with a new generation
            again = tgrad.Tensor.from_numpy(np.zeros((2, 2), np.float32))
            assert again._handle & 0xFFFFFFFF == handle & 0xFFFFFFFF and again._handle != handle
    status = _call(name, _make_args(name, handle, None))
    expected = {int(lib.TGRAD_ERR_INVALID_HANDLE), int(lib.TGRAD_ERR_WRONG_HANDLE_KIND)}
    assert status in expected, f"{name} with a {kind} handle returned {status}"
    if kind == "stale":
        again.release()


def test_release_twice_and_release_zero() -> None:
    t = tgrad.Tensor.from_numpy(np.zeros((2, 2), np.float32))
    h = t._handle
    assert lib.tgrad_tensor_release(0) == 0
    assert lib.tgrad_tensor_release(h) == 0
    assert lib.tgrad_tensor_release(h) == lib.TGRAD_ERR_INVALID_HANDLE
    t._handle = 0  # already released by hand


def test_cpu_isa_name_is_total() -> None:
    names = [lib.tgrad_cpu_isa_name(i, ffi.NULL) for i in range(64)]
    assert names[0] != ffi.NULL and ffi.NULL in names
    assert lib.tgrad_cpu_isa_name(-1, ffi.NULL) == ffi.NULL


# Functions that take tensor handles in an array (the sweep above passes handles by value only):
# each array slot gets a bad handle in turn.
@pytest.mark.parametrize("kind", ["zero", "forged", "released"])
def test_handles_in_arrays_are_checked(kind: str) -> None:
    p = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.float32)
    dead = tgrad.tensor(np.ones(4, np.float32), dtype=tgrad.float32)
    bad = {"zero": 0, "forged": 0x1234, "released": dead._handle}[kind]
    dead.release()
    expected = {int(lib.TGRAD_ERR_INVALID_HANDLE), int(lib.TGRAD_ERR_WRONG_HANDLE_KIND)}
    scalars = ffi.new("float[]", [0.5] * int(lib.TGRAD_OPTIM_NSCALARS) * 2)
    live = tgrad.live_tensors()
    for slot in range(8):  # two AdamW tensors of four inputs: tgrad_optim_step_many
        hs = ffi.new("tgrad_tensor_t[]", [bad if i == slot else p._handle for i in range(8)])
        outs = ffi.new("tgrad_tensor_t[]", [9] * 6)
        assert lib.tgrad_optim_step_many(lib.TGRAD_OPTIM_ADAMW, 0, 2, 4, hs, scalars, 0, outs) in expected
        assert list(outs) == [9] * 6
    for slot in range(4):  # tgrad_optim_step
        hs = ffi.new("tgrad_tensor_t[]", [bad if i == slot else p._handle for i in range(4)])
        out = ffi.new("tgrad_tensor_t *", 9)
        assert lib.tgrad_optim_step(lib.TGRAD_OPTIM_ADAMW, 0, 0, 4, hs, scalars, out) in expected
        assert out[0] == 9
    assert tgrad.live_tensors() == live
