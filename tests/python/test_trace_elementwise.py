"""tgrad.trace with elementwise ops: recorded under their registry names, replayed through
conformance.elementwise, and the layers the issue names (torchlens' tutorial MLP, a GELU MLP, a
SiLU-gated MLP) traced and validated; a corrupted payload is pinned to its op.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.trace import Trace


def _t(rng: np.random.Generator, *shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _kinds(tr: Trace) -> list[str]:
    return [op.kind for op in tr]


# ---- the layers -----------------------------------------------------------------------------------


def torchlens_mlp(x: tgrad.Tensor, w1: tgrad.Tensor, b1: tgrad.Tensor, w2: tgrad.Tensor,
                  b2: tgrad.Tensor) -> tgrad.Tensor:
    """torchlens' tutorial MLP (Linear, ReLU, Linear), weights [out, in] as torch holds them."""
    return (x @ w1.T + b1).relu() @ w2.T + b2


def gelu_mlp(x: tgrad.Tensor, w1: tgrad.Tensor, b1: tgrad.Tensor, w2: tgrad.Tensor,
             b2: tgrad.Tensor) -> tgrad.Tensor:
    return tgrad.gelu(x @ w1.T + b1, approximate="tanh") @ w2.T + b2


def test_torchlens_mlp_traces_and_validates(rng: np.random.Generator) -> None:
    x, w1, b1, w2, b2 = _t(rng, 4, 8), _t(rng, 16, 8), _t(rng, 16), _t(rng, 8, 16), _t(rng, 8)
    tr = tgrad.trace(torchlens_mlp, x, w1, b1, w2, b2)
    assert _kinds(tr)[5:] == ["transpose", "matmul", "add", "relu", "transpose", "matmul", "add"]
    add = tr.ops[7]
    assert [tr.ops[i].kind for i in add.inputs] == ["matmul", "input"]  # operands in call order
    result = tr.validate()
    assert result.passed, result.message
    assert [r.state for r in result.results].count("passed") == 7
    assert np.array_equal(tr.output_ops[0].payload, tr.result.numpy().view(np.uint16))


def test_gelu_and_silu_gated_mlps_trace_and_validate(rng: np.random.Generator) -> None:
    x, w1, b1, w2, b2 = _t(rng, 3, 8), _t(rng, 32, 8), _t(rng, 32), _t(rng, 8, 32), _t(rng, 8)
    tr = tgrad.trace(gelu_mlp, x, w1, b1, w2, b2)
    assert "gelu_tanh" in _kinds(tr)
    assert tr.validate().passed, tr.validate().message

    gate, up, down_w = _t(rng, 8, 24), _t(rng, 8, 24), _t(rng, 8, 24)
    down = tgrad.nn.Linear.from_tensors(down_w)  # y = h @ down_w.T
    tr = tgrad.trace(lambda x, g, u: down(tgrad.silu(x @ g) * (x @ u)), x, gate, up)
    assert {"silu", "mul", "matmul"} <= set(_kinds(tr))
    assert tr.validate().passed, tr.validate().message


def _every_op(x: tgrad.Tensor, y: tgrad.Tensor) -> tuple[tgrad.Tensor, ...]:
    """Every registry op once, on broadcast and viewed operands, with numbers among them."""
    p = x.abs() + 0.5  # positive: rsqrt of it is finite
    unary = (x.relu(), x.gelu(), x.gelu("tanh"), x.silu(), x.sigmoid(), x.tanh(), x.exp(), -x,
             abs(x), x.square(), p.rsqrt())
    binary = (x + y, x - y[0], x * y.T.T, x / 3.0, 1 - x, tgrad.maximum(x, y[:, :1]),
              tgrad.minimum(x.T, 0.0))
    more = (p.sqrt(), p.log(), x.log1p(), x.sin(), x.cos(), p ** y, 2 ** x, x ** 2)
    derivatives = (tgrad.gelu_backward(x, y), tgrad.gelu_tanh_backward(x, y[0]), tgrad.silu_backward(x, 2.0),
                   tgrad.sigmoid_backward(x.sigmoid(), y), tgrad.tanh_backward(x.tanh(), y),
                   tgrad.relu_backward(x, y), tgrad.rsqrt_backward(p.rsqrt(), y), tgrad.sqrt_backward(p.sqrt(), y))
    return unary + binary + more + derivatives


def test_every_registry_op_is_recorded_under_its_name_and_replays(rng: np.random.Generator) -> None:
    x, y = _t(rng, 5, 6), _t(rng, 5, 6)
    tr = tgrad.trace(_every_op, x, y)
    assert set(tgrad.ops.REGISTRY) <= set(_kinds(tr))
    one_minus = next(op for op in tr if op.kind == "sub" and tr.ops[op.inputs[0]].kind == "constant")
    assert tr.ops[one_minus.inputs[0]].shape == () and tr.ops[one_minus.inputs[1]].kind == "input"
    result = tr.validate()
    assert result.passed, result.message
    assert {r.kind for r in result.results if r.state == "passed"} >= set(tgrad.ops.REGISTRY)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_traces_validate_with_fusion_on_and_off(rng: np.random.Generator, fusion: bool) -> None:
    x, w1, b1, w2, b2 = _t(rng, 4, 8), _t(rng, 16, 8), _t(rng, 16), _t(rng, 8, 16), _t(rng, 8)
    was = tgrad.fusion_enabled()
    tgrad.set_fusion(fusion)
    try:
        tr = tgrad.trace(gelu_mlp, x, w1, b1, w2, b2)
    finally:
        tgrad.set_fusion(was)
    assert tr.validate().passed


# ---- corrupted traces -----------------------------------------------------------------------------


def _flip_payload_byte(record: dict[str, Any], byte: int) -> None:
    raw = bytearray(base64.b64decode(record["payload"]["data"]))
    raw[byte] ^= 0x01
    record["payload"]["data"] = base64.b64encode(bytes(raw)).decode("ascii")


def test_a_flipped_output_byte_is_named_by_validate(rng: np.random.Generator) -> None:
    x, w1, b1, w2, b2 = _t(rng, 4, 8), _t(rng, 16, 8), _t(rng, 16), _t(rng, 8, 16), _t(rng, 8)
    document = json.loads(tgrad.trace(torchlens_mlp, x, w1, b1, w2, b2).to_json(payloads=True))
    relu = next(r for r in document["ops"] if r["kind"] == "relu")
    _flip_payload_byte(relu, 6)  # element 3's low byte
    result = Trace.from_json(json.dumps(document)).validate()
    assert result.state == "failed"
    assert result.message.startswith(f"op {relu['id']} (relu) failed")
    # The matmul that reads it replays from the corrupt payload and disagrees too; the first
    # failure is the op that made the bad bytes.
    assert result.failed_ops[0] == relu["id"]
    assert next(r for r in result.results if r.op == relu["id"]).index == (0, 3)


def test_a_wrong_elementwise_result_in_memory_fails_that_op(rng: np.random.Generator) -> None:
    x, y = _t(rng, 5, 6), _t(rng, 1, 6)
    tr = tgrad.trace(lambda a, b: (a * b).silu(), x, y)
    silu = tr.ops[-1]
    assert silu.kind == "silu" and silu.payload is not None
    silu.payload[2, 1] ^= 0x8000  # the sign of one element
    result = tr.validate()
    assert result.failed_ops == [silu.id] and result.results[silu.id].index == (2, 1)


# ---- stored traces --------------------------------------------------------------------------------


def test_a_stored_elementwise_trace_validates_later(rng: np.random.Generator) -> None:
    x, y = _t(rng, 3, 4), _t(rng, 4)
    tr = tgrad.trace(lambda a, b: tgrad.maximum(a - b, 0.25).gelu(), x, y)
    stored = Trace.from_json(tr.to_json(payloads=True))
    assert _kinds(stored) == _kinds(tr) and stored.validate().passed


def test_an_unknown_kind_in_a_stored_trace_is_refused(rng: np.random.Generator) -> None:
    x = _t(rng, 2, 3)
    document = json.loads(tgrad.trace(lambda a: a.exp(), x).to_json(payloads=True))
    document["ops"][1]["kind"] = "no_such_kind"  # (softmax is a kind now: tgrad.softmax)
    with pytest.raises(errors.InvalidArgumentError, match="op 1.*kind 'no_such_kind'"):
        Trace.from_json(json.dumps(document))


def test_an_elementwise_op_with_the_wrong_number_of_inputs_fails_validation(rng: np.random.Generator) -> None:
    x, y = _t(rng, 2, 3), _t(rng, 2, 3)
    document = json.loads(tgrad.trace(lambda a, b: a + b, x, y).to_json(payloads=True))
    document["ops"][2]["inputs"] = [0]
    result = Trace.from_json(json.dumps(document)).validate()
    assert result.failed_ops == [2] and "2 input(s), it has 1" in result.message


# ---- the docs' example ----------------------------------------------------------------------------


def test_the_docs_mlp_example_runs() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    section = text.split("### Example: torchlens' tutorial MLP", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/observability.md", "exec"), namespace)  # noqa: S102 - our own docs
    namespace.clear()  # its tensors go before the leak check


def test_without_mpmath_validate_says_so_and_judges_what_needs_no_mpmath(
        rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    normal = tgrad.trace(lambda a: a.gelu(), _t(rng, 3, 4))
    tie = tgrad.trace(lambda a: a.gelu(), tgrad.Tensor.from_bf16_bits(np.array([0x0005, 0x3F80], np.uint16)))
    monkeypatch.setitem(sys.modules, "mpmath", None)  # import mpmath now fails
    assert normal.validate().passed  # float64 decides every ordinary input
    # gelu of 5 * 2^-133: float64 gives the midpoint x/2 exactly; only mpmath can say which way
    with pytest.raises(ModuleNotFoundError, match="mpmath"):
        tie.validate()
