"""tgrad.trace and Trace.validate: record what a function did with lazy tensors, then prove it.

One test per promise of tgrad/trace.py: every op kind is recorded with its inputs, shape, view,
buffer id, route and payload; outputs are realized once; validate() replays each op through the
oracle bit for bit and names the first offending op when a payload is wrong; the refusals are
typed, carry their registry codes and happen before anything runs.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.trace import SCHEMA, Trace
from tgrad.tensor import _RECORDER

ALL_KINDS = {"input", "constant", "matmul", "transpose", "permute", "expand", "slice", "select",
             "reshape", "view", "contiguous"}


def _t(rng: np.random.Generator, *shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _every_kind(x: tgrad.Tensor, y: tgrad.Tensor) -> tuple[tgrad.Tensor, ...]:
    z = x.T @ y                                             # transpose, matmul
    w = z[::2, 1:].reshape(-1)                              # slice, reshape (a materialized copy)
    c = tgrad.Tensor.from_numpy(np.ones((1, 5), np.float32))  # constant
    e = c.expand(3, 5)                                      # expand
    p = z.permute(1, 0)[0]                                  # permute, select
    v = z.contiguous().view(5, 6)[..., 2]                   # contiguous, view, select
    q = (z.transpose(0, 1) @ x.T).T                         # transpose with axes
    return q, w, e, p, v


def _operands(rng: np.random.Generator) -> tuple[tgrad.Tensor, tgrad.Tensor]:
    # Made inside each test, not by a fixture: pytest holds fixture values past the leak check.
    return _t(rng, 8, 6), _t(rng, 8, 5)


def test_every_op_kind_is_recorded_with_its_inputs(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    kinds = [op.kind for op in tr]
    assert set(kinds) == ALL_KINDS
    assert kinds[:2] == ["input", "input"] and [op.origin for op in tr.ops[:2]] == ["argument"] * 2
    by_kind = {op.kind: op for op in tr}
    matmul = tr.ops[kinds.index("matmul")]
    assert [tr.ops[i].kind for i in matmul.inputs] == ["transpose", "input"]
    for op in tr:
        assert all(i < op.id for i in op.inputs), "ops are recorded in creation order"
    assert by_kind["reshape"].args == {"shape": [-1]}
    assert by_kind["expand"].args == {"shape": [3, 5]}
    assert by_kind["permute"].args == {"axes": [1, 0]}
    assert by_kind["slice"].args == {"key": [{"slice": [None, None, 2]}, {"slice": [1, None, None]}]}
    assert len(tr) == len(tr.ops) == len(list(tr)) and tr[0] is tr.ops[0]


def test_ops_carry_shape_view_buffer_and_route(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(lambda x, y: x.T @ y, a, b)
    inp, tr_op, mm = tr.ops[0], tr.ops[2], tr.ops[3]
    assert (inp.shape, inp.strides, inp.offset, inp.route) == ((8, 6), (6, 1), 0, "host")
    assert (tr_op.shape, tr_op.strides) == ((6, 8), (1, 6))
    assert tr_op.buffer_id == inp.buffer_id == a.buffer_id  # a view shares its input's buffer
    # 6 rows: the skinny path on a variant that has one, else the GEMM frame
    kernel = tgrad.matmul_order_kernel()  # the packed kernel of the default order (block32: AMX or the variant's)
    stream = tgrad.cpu_stream_isa()
    assert mm.shape == (6, 5) and mm.route in (f"cpu.{stream}.skinny", f"cpu.{stream}_block32.skinny",
                                               f"cpu.{kernel}.gemm", f"cpu.{kernel}.skinny")
    assert mm.buffer_id not in (a.buffer_id, b.buffer_id)


@pytest.mark.parametrize("m,k,n", [(1, 64, 48), (6, 8, 5), (16, 96, 40), (80, 96, 72)])
def test_a_traced_product_takes_the_route_it_takes_untraced(rng: np.random.Generator, m: int, k: int, n: int) -> None:
    # The selection in force ("auto" picks one variant for packed products and another for
    # streamed ones) is kept under trace: the route must not depend on whether a trace records it.
    a, b = _t(rng, m, k), _t(rng, k, n)
    untraced = (a @ b).route
    explained = (a @ b).explain(json=True)["steps"][0]["route"]
    tr = tgrad.trace(lambda x, y: x @ y, a, b)
    assert tr.ops[-1].route == untraced == explained  # explain, trace and the route agree
    assert tr.plans[0]["steps"][0]["route"] == untraced
    assert tr.options["cpu_isa"] == (tgrad.cpu_isa() if tgrad.cpu_isa_forced() else "auto")


def test_payloads_are_the_ops_output_bits(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    np.testing.assert_array_equal(tr.ops[0].payload, a.numpy().view(np.uint16))
    for op, value in zip(tr.output_ops, tr.result):
        assert op.payload is not None and op.payload.dtype == np.uint16
        np.testing.assert_array_equal(op.payload, value.numpy().view(np.uint16))
        assert op.payload.shape == op.shape


def test_outputs_are_realized_once_and_returned(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(lambda x, y: {"out": x.T @ y}, a, b)
    out = tr.result["out"]
    assert out.is_realized
    assert [op.id for op in tr.output_ops] == list(tr.outputs) == [3]
    assert tr.plans[0]["steps"][0]["op"] == "matmul"  # the plan read before the realization
    assert out.explain(json=True)["steps"] == []  # nothing left to run


def test_validate_passes_on_a_correct_run(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    status = tgrad.trace(_every_kind, a, b).validate()
    assert status.state == "passed" and status.passed and bool(status)
    assert status.failed_ops == []
    states = {r.state for r in status.results}
    assert states == {"passed", "source"}
    assert "bit-exact" in status.message


@pytest.mark.parametrize("isa", [n for n, ok in tgrad.cpu_isas().items() if ok])
def test_validate_is_bit_exact_on_every_cpu_variant(isa: str, rng: np.random.Generator) -> None:
    from tgrad.conformance.fills import fill_bits

    a = tgrad.Tensor.from_bf16_bits(fill_bits("special", (33, 17), rng))
    b = tgrad.Tensor.from_bf16_bits(fill_bits("special", (17, 9), rng))
    tr = tgrad.trace(lambda x, y: (x @ y).T @ x, a, b, cpu_isa=isa)
    # the variant's own kernels in the default order (block32: its block32 kernel)
    assert all(op.route.split(".")[1] in (isa, f"{isa}_block32") for op in tr if op.kind == "matmul")
    assert tr.validate().passed


def test_a_corrupted_kernel_output_fails_naming_that_op(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    bad = next(op for op in tr if op.kind == "matmul")
    bad.payload[2, 3] ^= 0x0001  # a wrong last bit, as a broken kernel would write
    status = tr.validate()
    assert status.state == "failed" and not status
    assert status.message.startswith(f"op {bad.id} (matmul) failed")
    assert "(2, 3)" in status.message
    first = next(r for r in status.results if r.state == "failed")
    assert (first.op, first.kind, first.index) == (bad.id, "matmul", (2, 3))
    assert bad.id in status.failed_ops


def test_a_corrupted_view_payload_fails_naming_that_op(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    bad = next(op for op in tr if op.kind == "select")
    bad.payload[1] ^= 0x8000
    status = tr.validate()
    assert status.message.startswith(f"op {bad.id} (select) failed"), status.message
    assert status.results[bad.id].index == (1,)


def test_a_copied_zero_copy_view_fails(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(lambda x, y: x.T @ y, a, b)
    tr.ops[2].buffer_id += 1000  # as if the transpose had been materialized
    status = tr.validate()
    assert status.message.startswith("op 2 (transpose) failed") and "zero-copy" in status.message


def test_a_wrong_shape_fails(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(lambda x, y: x.T @ y, a, b)
    tr.ops[3].payload = tr.ops[3].payload[:, :4]
    assert tr.validate().message.startswith("op 3 (matmul) failed: shape")


def test_tensors_made_inside_fn_and_captured_ones_are_recorded(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    outside = tgrad.Tensor.from_numpy(np.ones((5, 2), np.float32))

    def fn(x: tgrad.Tensor) -> tgrad.Tensor:
        return (x @ tgrad.Tensor.from_numpy(np.ones((6, 5), np.float32))) @ outside

    tr = tgrad.trace(fn, a)
    origins = [(op.kind, op.origin) for op in tr]
    assert ("constant", "fn") in origins and ("input", "captured") in origins
    assert tr.validate().passed


def test_an_op_off_the_output_path_is_not_run(rng: np.random.Generator) -> None:
    a, b = _operands(rng)

    def fn(x: tgrad.Tensor, y: tgrad.Tensor) -> tgrad.Tensor:
        x @ x.T  # made, never used: never realized, so no payload
        return x.T @ y

    tr = tgrad.trace(fn, a, b)
    unused = tr.ops[3]
    assert unused.kind == "matmul" and unused.payload is None
    status = tr.validate()
    assert status.passed and status.results[unused.id].state == "skipped"


def test_no_output_is_refused_before_anything_runs(rng: np.random.Generator) -> None:
    a = _t(rng, 4, 4)
    pending = a @ a  # a lazy input: still pending after the refusal
    for returns in (None, 3, [np.ones(2)], {"x": "y"}):
        with pytest.raises(errors.TraceNoOutputError) as info:
            tgrad.trace(lambda x, r=returns: (x @ x, r)[1], pending)
        assert info.value.code == "trace_no_output" and isinstance(info.value, TypeError)
    assert not pending.is_realized


def test_no_input_is_refused_before_fn_runs() -> None:
    called = []
    for inputs in ((), (np.ones((2, 2)),), (1, "a")):
        with pytest.raises(errors.TraceNoInputError) as info:
            tgrad.trace(lambda *x: called.append(x), *inputs)
        assert info.value.code == "trace_no_input"
    assert called == []


@pytest.mark.parametrize("options,says", [
    ({"devcie": "cpu"}, "unknown option 'devcie'"),
    ({"device": "metal"}, "not built"),
    ({"device": "opencl"}, "opencl"),  # unavailable here, or available but not traced (cpu only)
    ({"device": "tpu"}, "not a backend"),
    ({"cpu_isa": "avx9000"}, "not a CPU variant"),
    ({"threads": 0}, "threads must be"),
    ({"threads": True}, "threads must be"),
])
def test_an_option_the_runtime_cannot_honour_is_refused_before_fn_runs(
        options: dict[str, Any], says: str, rng: np.random.Generator) -> None:
    called = []
    a = _t(rng, 2, 2)
    with pytest.raises(errors.TraceOptionUnsupportedError) as info:
        tgrad.trace(lambda x: called.append(x) or x @ x, a, **options)
    assert info.value.code == "trace_option_unsupported" and says in str(info.value)
    assert called == [] and tgrad.live_tensors() >= 1


def test_metal_refusal_names_the_backends_own_reason(rng: np.random.Generator) -> None:
    row = next(b for b in tgrad.backends() if b.name == "metal")
    if row.available:  # pragma: no cover - a machine with a Metal device
        pytest.skip("metal is available here")
    with pytest.raises(errors.TraceOptionUnsupportedError, match=row.device):
        tgrad.trace(lambda x: x, _t(rng, 1, 1), device="metal")


def test_cpu_isa_and_threads_options_apply_to_the_realization_only(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    isa, threads = tgrad.cpu_isa(), tgrad.num_threads()
    tr = tgrad.trace(lambda x, y: x.T @ y, a, b, cpu_isa="portable", threads=1, device="cpu")
    assert tr.ops[3].route == "cpu.portable_block32.gemm"
    assert tr.options == {"device": "cpu", "cpu_isa": "portable", "threads": 1}
    assert (tgrad.cpu_isa(), tgrad.num_threads()) == (isa, threads)


def test_an_exception_in_fn_propagates_and_stops_recording(rng: np.random.Generator) -> None:
    a, b = _operands(rng)

    def boom(x: tgrad.Tensor, y: tgrad.Tensor) -> None:
        x.T @ y
        raise KeyError("inside fn")

    with pytest.raises(KeyError, match="inside fn"):
        tgrad.trace(boom, a, b)
    assert _RECORDER.get() is None


def test_only_the_calling_context_is_recorded(rng: np.random.Generator) -> None:
    a, b = _operands(rng)

    def fn(x: tgrad.Tensor, y: tgrad.Tensor) -> tgrad.Tensor:
        other = threading.Thread(target=lambda: (y.T @ y).realize())
        other.start()
        other.join()
        return x.T @ y

    tr = tgrad.trace(fn, a, b)
    assert [op.kind for op in tr] == ["input", "input", "transpose", "matmul"]


def test_json_has_the_documented_schema(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    text = tr.to_json()
    assert text == tr.to_json()  # stable
    data = json.loads(text)
    assert set(data) == {"schema", "library_version", "options", "outputs", "ops", "plans"}
    assert data["schema"] == SCHEMA and data["library_version"] == tgrad.version()
    assert data["outputs"] == list(tr.outputs)
    keys = {"id", "kind", "inputs", "args", "shape", "strides", "offset", "buffer_id", "route",
            "origin", "payload"}
    import hashlib

    for record, op in zip(data["ops"], tr.ops):
        assert set(record) == keys
        assert record["payload"]["sha256"] == hashlib.sha256(op.payload.astype("<u2").tobytes()).hexdigest()
        assert record["payload"]["bytes"] == 2 * op.payload.size and "data" not in record["payload"]


def test_a_stored_trace_validates_later(rng: np.random.Generator) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(_every_kind, a, b)
    stored = Trace.from_json(tr.to_json(payloads=True))
    assert [op.kind for op in stored] == [op.kind for op in tr]
    assert stored.validate().passed
    stored.ops[-1].payload[0] ^= 1
    assert stored.validate().message.startswith(f"op {stored.ops[-1].id} ")
    without = Trace.from_json(tr.to_json())
    assert {r.state for r in without.validate().results} <= {"source", "skipped"}
    with pytest.raises(errors.InvalidArgumentError):
        Trace.from_json(json.dumps({"schema": "other/9", "ops": [], "outputs": []}))


def _stored(rng: np.random.Generator) -> dict[str, Any]:
    a, b = _operands(rng)
    return json.loads(tgrad.trace(lambda x, y: x.T @ y, a, b).to_json(payloads=True))


def _without(record: dict[str, Any], key: str) -> None:
    del record[key]


# (what is wrong, how to make it wrong, what the message names)
BAD_DOCUMENTS: list[tuple[str, Any, str]] = [
    ("not_an_object", lambda d: [d], "not a JSON object"),
    ("no_ops", lambda d: _without(d, "ops"), "'ops'"),
    ("no_outputs", lambda d: _without(d, "outputs"), "'outputs'"),
    ("ops_not_a_list", lambda d: d.update(ops={}), "'ops'"),
    ("outputs_not_integers", lambda d: d.update(outputs=["2"]), "'outputs'"),
    ("output_out_of_range", lambda d: d.update(outputs=[4]), "output 4"),
    ("options_not_an_object", lambda d: d.update(options=[1]), "'options'"),
    ("plans_not_a_list", lambda d: d.update(plans="x"), "'plans'"),
    ("library_version_not_a_string", lambda d: d.update(library_version=1), "'library_version'"),
    ("op_not_an_object", lambda d: d["ops"].__setitem__(0, 5), "op 0"),
    *[(f"op_without_{key}", lambda d, key=key: _without(d["ops"][2], key), f"op 2.*'{key}'")
      for key in ("id", "kind", "inputs", "args", "shape", "strides", "offset", "buffer_id", "route")],
    ("id_not_its_position", lambda d: d["ops"][1].update(id=0), "op 1.*'id'"),
    ("id_a_string", lambda d: d["ops"][1].update(id="1"), "op 1.*'id'"),
    ("kind_not_a_string", lambda d: d["ops"][2].update(kind=3), "op 2.*'kind'"),
    ("kind_unknown", lambda d: d["ops"][2].update(kind="getitem"), "op 2.*kind 'getitem'"),
    ("inputs_not_a_list", lambda d: d["ops"][3].update(inputs=2), "op 3.*'inputs'"),
    ("input_a_float", lambda d: d["ops"][3].update(inputs=[1.0, 2]), "op 3.*'inputs'"),
    ("input_a_bool", lambda d: d["ops"][3].update(inputs=[True, 2]), "op 3.*'inputs'"),
    ("input_not_an_earlier_op", lambda d: d["ops"][2].update(inputs=[3]), "op 2.*input 3"),
    ("input_negative", lambda d: d["ops"][2].update(inputs=[-1]), "op 2.*input -1"),
    ("args_not_an_object", lambda d: d["ops"][2].update(args=[]), "op 2.*'args'"),
    ("shape_negative", lambda d: d["ops"][2].update(shape=[-6, -5]), "op 2.*'shape'"),
    ("shape_not_a_list", lambda d: d["ops"][2].update(shape="6x8"), "op 2.*'shape'"),
    ("strides_strings", lambda d: d["ops"][2].update(strides=["1", "6"]), "op 2.*'strides'"),
    ("offset_null", lambda d: d["ops"][2].update(offset=None), "op 2.*'offset'"),
    ("buffer_id_a_float", lambda d: d["ops"][2].update(buffer_id=1.5), "op 2.*'buffer_id'"),
    ("route_not_a_string", lambda d: d["ops"][2].update(route=[]), "op 2.*'route'"),
    ("origin_not_a_string", lambda d: d["ops"][2].update(origin=0), "op 2.*'origin'"),
    ("payload_not_an_object", lambda d: d["ops"][2].update(payload=5), "op 2.*'payload'"),
    ("payload_data_not_a_string", lambda d: d["ops"][2]["payload"].update(data=5), "op 2.*'data'"),
    ("payload_data_not_base64", lambda d: d["ops"][2]["payload"].update(data="@@@@"), "op 2.*base64"),
    ("payload_data_too_short", lambda d: d["ops"][2]["payload"].update(data="AAAA"), "op 2.*3 bytes"),
]


@pytest.mark.parametrize("case", [case for case, _, _ in BAD_DOCUMENTS])
def test_a_malformed_stored_trace_is_refused_naming_the_field(rng: np.random.Generator, case: str) -> None:
    _, spoil, names = next(entry for entry in BAD_DOCUMENTS if entry[0] == case)
    document = _stored(rng)
    spoilt = spoil(document)
    with pytest.raises(errors.InvalidArgumentError, match=names):
        Trace.from_json(json.dumps(document if spoilt is None else spoilt))


@pytest.mark.parametrize("text", ["", "{", "[" * 100_000 + "]" * 100_000, '{"ops": [' + "9" * 5000 + "]}",
                                  b"\xff{}", 42])
def test_text_that_is_not_a_json_document_is_refused(text: Any) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="Trace.from_json"):
        Trace.from_json(text)


def test_a_stored_op_without_its_inputs_fails_validation_instead_of_raising(rng: np.random.Generator) -> None:
    document = _stored(rng)
    transpose = next(r for r in document["ops"] if r["kind"] == "transpose")
    transpose["inputs"] = []
    result = Trace.from_json(json.dumps(document)).validate()
    assert result.state == "failed" and result.failed_ops == [transpose["id"]]


def test_validate_says_clearly_when_the_oracle_is_missing(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _operands(rng)
    tr = tgrad.trace(lambda x, y: x.T @ y, a, b)
    monkeypatch.setitem(sys.modules, "tgrad.conformance.oracle", None)
    with pytest.raises(ModuleNotFoundError, match="conformance"):
        tr.validate()


def test_fn_must_be_callable(rng: np.random.Generator) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.trace("not callable", _t(rng, 1, 1))  # type: ignore[arg-type]


def test_a_released_input_is_refused_before_fn_runs(rng: np.random.Generator) -> None:
    a = _t(rng, 2, 2)
    a.release()
    called = []
    with pytest.raises(errors.InvalidHandleError):
        tgrad.trace(lambda x: called.append(x), a)
    assert called == []
