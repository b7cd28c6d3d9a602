"""tgrad as a torchlens backend (tgrad.torchlens_provider, extra tgrad[torchlens]) against the real
torchlens package: the entry point torchlens activates, `tl.trace(fn, x, backend="tgrad")`, replay
validation through tgrad's oracle (passed, or the first offending op named), the typed refusals,
and docs/interop.md's tutorial (the MLP with bias and relu). Skipped only where torchlens is
missing; `nox -s interop` installs it and fails a skip."""

from __future__ import annotations

import importlib.metadata
import tomllib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.interop
tl = pytest.importorskip("torchlens", reason="torchlens is not installed (extra tgrad[torchlens])")
torch = pytest.importorskip("torch", reason="torch is not installed (torchlens needs it)")

import tgrad  # noqa: E402
from tgrad import torchlens_provider as provider  # noqa: E402
from torchlens.backends import (  # noqa: E402
    BackendMismatchError,
    BackendUnsupportedError,
    UnknownBackendError,
    get_backend_spec,
    unregister_backend_spec,
)
from torchlens.ecosystem import plugins  # noqa: E402
from torchlens.validation import last_validation_failure  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _declared_entry_point() -> str:
    """The `torchlens.backends` entry of pyproject.toml, as an entry_points.txt section."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    table = project["entry-points"]["torchlens.backends"]
    return "[torchlens.backends]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())


def _tgrad_declares_provider() -> bool:
    try:
        dist = importlib.metadata.distribution("tgrad")
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(ep.group == "torchlens.backends" for ep in dist.entry_points)


@pytest.fixture
def declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tgrad's `torchlens.backends` entry point visible to torchlens: an installed tgrad (nox)
    declares it itself; the source tree gets a dist-info carrying pyproject.toml's declaration.
    Whatever registered backend "tgrad" is unregistered afterwards."""
    monkeypatch.delenv(plugins.PLUGINS_ENV_VAR, raising=False)
    if not _tgrad_declares_provider():
        info = tmp_path / "tgrad-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tgrad\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(_declared_entry_point())
        monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield
    finally:
        unregister_backend_spec("tgrad")


@pytest.fixture
def activated(declared: None) -> Any:
    """tgrad's provider activated the way a user does it: torchlens' explicit,
    distribution-scoped activation of the entry point."""
    report = plugins.activate("tgrad", groups=("torchlens.backends",))
    assert [c.name for c in report.loaded] == ["tgrad"] and not report.failed
    return get_backend_spec("tgrad")


def _tensor(rng: np.random.Generator, *shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _tutorial_mlp() -> tuple[Callable[[tgrad.Tensor], tgrad.Tensor], tgrad.Tensor]:
    """docs/interop.md's tutorial: two Linear layers with bias, relu between them."""
    rng = np.random.default_rng(22)
    fc1 = tgrad.nn.Linear.from_tensors(_tensor(rng, 16, 8), _tensor(rng, 16))
    fc2 = tgrad.nn.Linear.from_tensors(_tensor(rng, 4, 16), _tensor(rng, 4))

    def mlp(x: tgrad.Tensor) -> tgrad.Tensor:
        return fc2(fc1(x).relu())

    return mlp, _tensor(rng, 2, 8)


def test_the_entry_point_is_a_zero_argument_factory_of_the_spec(activated: Any) -> None:
    assert activated.name == "tgrad" and activated.capture_trace is provider.capture_trace
    for flag, (value, why) in provider.CAPABILITY_NOTES.items():
        assert getattr(activated.capabilities, flag) == value, (flag, why)
    assert activated.capabilities.validation_replay and not activated.capabilities.backward_capture


def test_tutorial_mlp_traces_and_validates(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    assert tr.layer_labels == ["input_1", "captured_1", "transpose_1_1", "matmul_1_2", "captured_2",
                               "add_1_3", "relu_1_4", "captured_3", "transpose_2_5", "matmul_2_6",
                               "captured_4", "add_2_7"]
    relu = tr["relu_1_4"]
    assert relu.parents == ("add_1_3",) and relu.children == ("matmul_2_6",) and relu.shape == (2, 16)
    assert isinstance(relu.out, tgrad.Tensor) and relu.out.shape == (2, 16)
    assert relu.payload.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(relu.out.numpy(np.float32), np.maximum(tr["add_1_3"].out.numpy(np.float32), 0))
    assert tr.output_layers == ["add_2_7"] and tr.input_layers == ["input_1"]
    direct = mlp(x).numpy()
    assert np.array_equal(tr.output_ops[0].out.numpy().view(np.uint16), direct.view(np.uint16))

    assert tr.validate_forward_pass() is True
    status = tr.validation_replay_status
    assert status.state == "passed" and status.backend == "tgrad", status.message
    assert status.replayed_node_count == 7 and tr.validate().state == "passed"
    assert tr.validate_forward_pass(direct) is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failing tl.validate warns
        assert tl.validate(mlp, x, scope="forward", backend="tgrad") is True


def test_torchlens_tutorial_runs_line_for_line(activated: Any) -> None:
    """torchlens' own tutorial lines, with tgrad tensors: validate_forward_pass is True for a
    completed replay (the status on validation_replay_status) and .out is the framework's tensor."""
    mlp, x = _tutorial_mlp()
    trace = tl.trace(mlp, x, backend="tgrad")
    assert trace.validate_forward_pass([mlp(x)]) is True
    values = trace.output_ops[0].out.numpy()
    assert np.array_equal(values.view(np.uint16), mlp(x).numpy().view(np.uint16))
    assert trace.validation_replay_status.state == "passed"
    trace["relu_1_4"].payload[0, 0] = -1.0  # a tampered record: a completed replay that fails
    assert trace.validate_forward_pass() is False
    assert trace.validation_replay_status.state == "failed"


def test_an_incomplete_replay_returns_the_status_not_a_bool(activated: Any) -> None:
    """As torchlens' Trace: only passed and failed are booleans; an op left unreplayed gives the
    "unverified" status itself (it has no truth value)."""
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    tr["relu_1_4"].op.payload = None  # its consumer and itself cannot be replayed now
    result = tr.validate_forward_pass()
    assert result is tr.validation_replay_status and result.state == "unverified"
    with pytest.raises(TypeError):
        bool(result)


class _MLP:
    """The tutorial's MLP as a callable object holding its layers in a list."""

    def __init__(self) -> None:
        rng = np.random.default_rng(5)
        self.layers = [tgrad.nn.Linear.from_tensors(_tensor(rng, 16, 8), _tensor(rng, 16)),
                       tgrad.nn.Linear.from_tensors(_tensor(rng, 4, 16), _tensor(rng, 4))]

    def __call__(self, x: tgrad.Tensor) -> tgrad.Tensor:
        return self.layers[1](self.layers[0](x).relu())

    def forward(self, x: tgrad.Tensor) -> tgrad.Tensor:
        return self(x)


def test_captured_tensors_are_named_as_fn_reaches_them(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    closure = tl.trace(mlp, x, backend="tgrad")
    assert [(op.label, op.address) for op in closure if op.op.origin == "captured"] == [
        ("captured_1", "fc1.weight"), ("captured_2", "fc1.bias"),
        ("captured_3", "fc2.weight"), ("captured_4", "fc2.bias")]
    model = _MLP()
    for fn in (model, model.forward):
        tr = tl.trace(fn, x, backend="tgrad")
        assert [op.address for op in tr if op.op.origin == "captured"] == [
            "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
        assert tr.validate().passed
    assert tr["input_1"].address is None and tr["relu_1_4"].address is None


def test_a_modules_tensors_are_named_by_their_paths(activated: Any) -> None:
    """A tgrad.nn.Module's parameters are addressed by their state_dict paths, not through the
    registries that hold them."""
    rng = np.random.default_rng(5)
    model = tgrad.nn.Sequential(tgrad.nn.Linear.from_tensors(_tensor(rng, 16, 8), _tensor(rng, 16)), tgrad.nn.ReLU(),
                                tgrad.nn.Linear.from_tensors(_tensor(rng, 4, 16), _tensor(rng, 4)))
    tr = tl.trace(model, _tensor(rng, 2, 8), backend="tgrad")
    assert [op.address for op in tr if op.op.origin == "captured"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert tr.validate().passed


def test_backend_none_resolves_to_tgrad_once_activated(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    assert tl.trace(mlp, x).backend == "tgrad"
    assert tl.validate(mlp, x, scope="forward") is True


def test_a_tampered_payload_is_named(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    tr["relu_1_4"].payload[1, 3] = 1000.0
    assert tr.validate_forward_pass() is False
    status = tr.validation_replay_status
    assert status.state == "failed" and not status.passed
    assert status.message.startswith("Replay validation failed at relu_1_4 (relu): 1 of 32 elements"), status.message
    assert "index (1, 3)" in status.message
    failure = last_validation_failure()
    assert failure is not None and failure.op_label == "relu_1_4" and failure.check == "forward_replay"
    # The consumer of the tampered payload no longer matches either; the first offender is named.
    assert [d["label"] for d in status.decisions if d["state"] == "failed"] == ["relu_1_4", "matmul_2_6"]


def test_a_stored_trace_is_a_lens_trace_again(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    stored = provider.LensTrace(tgrad.Trace.from_json(tr.tgrad_trace.to_json(payloads=True)))
    assert stored.layer_labels == tr.layer_labels and stored.validate().passed
    assert np.array_equal(stored["relu_1_4"].payload.view(np.uint16), tr["relu_1_4"].payload.view(np.uint16))


def test_a_tampered_op_is_named(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    tr["add_1_3"].op.kind = "sub"  # the record now claims a sub produced add's bytes
    assert tr.validate_forward_pass() is False
    status = tr.validation_replay_status
    assert status.state == "failed" and status.message.startswith("Replay validation failed at add_1_3 (sub)")


def test_a_wrong_ground_truth_fails(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad")
    assert tr.validate_forward_pass([mlp(x)]) is True  # a tgrad Tensor is a ground truth too
    assert tr.validate_forward_pass(torch.from_dlpack(mlp(x))) is True  # so is torch bfloat16
    wrong = mlp(x).numpy()
    wrong[0, 0] = -wrong[0, 0] + 1
    assert tr.validate_forward_pass(wrong) is False
    status = tr.validation_replay_status
    assert status.state == "failed" and "ground truth differs from output add_2_7" in status.message
    assert last_validation_failure().check == "ground_truth"
    for odd, why in [(wrong.astype(np.float32), "differs"), ([wrong, wrong], "2 ground-truth outputs for 1"),
                     (torch.zeros(2, 4, dtype=torch.bfloat16), "differs"),
                     (torch.zeros(2, 4, dtype=torch.float32), "differs"),  # not bf16: never equal
                     ({"not": "an array"}, "differs"),
                     (torch.zeros(2, 4, dtype=torch.bfloat16, requires_grad=True),  # torch refuses to export
                      "is not an array (InvalidArgumentError)"),
                     ("text", "differs")]:
        status = tr.validate(odd)
        assert status.state == "failed" and why in status.message, (odd, status.message)


def test_tl_validate_names_the_first_op_the_oracle_disagrees_with(
        activated: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel and the oracle disagreeing (simulated on the oracle's side: one bit of every matmul
    flipped) makes tl.validate False, and torchlens' warning names the first matmul."""
    from tgrad.conformance import oracle

    real = oracle.matmul_bits

    def off_by_one_bit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = np.array(real(a, b), dtype=np.uint16)
        bits[0, 0] ^= 1
        return bits

    monkeypatch.setattr(oracle, "matmul_bits", off_by_one_bit)
    mlp, x = _tutorial_mlp()
    with pytest.warns(tl.errors.TorchLensWarning, match=r"forward_replay mismatch at matmul_1_2 \(matmul\)"):
        assert tl.validate(mlp, x, scope="forward", backend="tgrad") is False


@pytest.mark.parametrize("option", [
    {"intervene": lambda *a: None},                          # torchlens' own capability gate
    {"capture": "options"},
    {"save": "none"},
    {"input_kwargs": {"y": 1}},
    {"grad_transform": abs},
    {"grad_transform": "MISSING"},                           # only torchlens' sentinel means "not given"
    {"lookback": np.array([1, 2])},                          # not compared with ==: refused
    {"lookback_payload_policy": 3},
])
def test_options_tgrad_cannot_honour_are_refused_with_torchlens_codes(activated: Any, option: dict[str, Any]) -> None:
    mlp, x = _tutorial_mlp()
    if option == {"capture": "options"}:
        option = {"capture": tl.options.CaptureOptions(verbose=True)}
    with pytest.raises(BackendUnsupportedError) as info:
        tl.trace(mlp, x, backend="tgrad", **option)
    assert info.value.code == "backend_unsupported"
    if "intervene" not in option:  # refused by tgrad: also tgrad's typed error
        assert isinstance(info.value, tgrad.errors.TraceOptionUnsupportedError)
        assert info.value.fields["tgrad_code"] == "trace_option_unsupported"


def test_other_refusals(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    with pytest.raises(BackendMismatchError) as mismatch:  # no tgrad Tensor: torchlens refuses
        tl.trace(mlp, np.ones((2, 8), np.float32), backend="tgrad")
    assert mismatch.value.code == "backend_mismatch"
    with pytest.raises(tgrad.errors.TraceNoOutputError) as no_output:
        tl.trace(lambda t: 3, x, backend="tgrad")
    assert isinstance(no_output.value, BackendUnsupportedError) and no_output.value.code == "backend_unsupported"
    with pytest.raises(BackendUnsupportedError, match="backward"):
        tl.validate(mlp, x, scope="backward", backend="tgrad")
    with pytest.raises(tgrad.errors.TraceOptionUnsupportedError, match="random_seed"):
        tl.validate(mlp, x, scope="forward", backend="tgrad", random_seed=1)
    with pytest.raises(tgrad.errors.TraceNoInputError):
        provider.capture_trace(mlp, (1.0,))
    tr = tl.trace(mlp, x, backend="tgrad")
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="no op labelled"):
        tr["relu_9_9"]
    with pytest.raises(tgrad.errors.InvalidArgumentError):
        tr[len(tr)]


@pytest.mark.parametrize("mode", ["function_root", "object_module"])
def test_module_identity_mode_is_refused_by_torchlens_own_gate(activated: Any, mode: str) -> None:
    """docs/interop.md says so: torchlens refuses any explicit mode for a non-torch backend (even
    the one tgrad declares) before tgrad's capture is called; it is not a tgrad error."""
    mlp, x = _tutorial_mlp()
    with pytest.raises(BackendUnsupportedError, match="module_identity_mode selection") as info:
        tl.trace(mlp, x, backend="tgrad", capture=tl.options.CaptureOptions(module_identity_mode=mode))
    assert not isinstance(info.value, tgrad.errors.TgradError)


def test_a_self_referencing_output_is_a_typed_error_not_recursion(activated: Any) -> None:
    _, x = _tutorial_mlp()

    def loop(t: tgrad.Tensor) -> Any:
        out: list[Any] = [t.relu()]
        out.append(out)
        return out

    with pytest.raises(tgrad.errors.InvalidArgumentError, match="contains itself"):
        tl.trace(loop, x, backend="tgrad")


def test_forgetting_the_activation_is_torchlens_unknown_backend(declared: None) -> None:
    """What a user sees without plugins.activate("tgrad"): torchlens' own error (docs/interop.md
    names the remedy; tgrad's code has not run yet, so it cannot add to the message)."""
    mlp, x = _tutorial_mlp()
    with pytest.raises(UnknownBackendError, match="Unknown backend 'tgrad'"):
        tl.trace(mlp, x, backend="tgrad")


def test_activation_without_an_installed_distribution() -> None:
    """provider.activate() registers the same spec directly (a source tree), idempotently."""
    try:
        first = provider.activate()
        assert provider.activate().name == first.name == "tgrad"
        mlp, x = _tutorial_mlp()
        assert tl.trace(mlp, x, backend="tgrad").validate().passed
    finally:
        unregister_backend_spec("tgrad")
    with pytest.raises(UnknownBackendError):
        get_backend_spec("tgrad")


def _docs_tutorial() -> str:
    """The python block of docs/interop.md's torchlens section."""
    text = (ROOT / "docs" / "interop.md").read_text()
    section = text[text.index("## torchlens ("):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_docs_tutorial_runs(declared: None) -> None:
    """docs/interop.md's tutorial, run as written (it activates the provider itself), gives what
    its comments say."""
    namespace: dict[str, Any] = {}
    exec(compile(_docs_tutorial(), "docs/interop.md", "exec"), namespace)
    assert namespace["labels"] == [
        "input_1", "captured_1", "transpose_1_1", "matmul_1_2", "captured_2", "add_1_3", "relu_1_4",
        "captured_3", "transpose_2_5", "matmul_2_6", "captured_4", "add_2_7"]
    relu = namespace["relu"]
    assert (relu.parents, relu.children, relu.shape) == (("add_1_3",), ("matmul_2_6",), (2, 16))
    assert namespace["weight"] == "fc1.weight"
    assert namespace["activation"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert namespace["state"] == "passed" and namespace["ok"] is True
    namespace.clear()  # the tensors it made go now (the leak check counts them)


# ---- derived gradients (grad_options; issue 36) -------------------------------------------------
def test_grad_options_is_declared(activated: Any) -> None:
    assert "grad_options" in activated.capabilities.trace_options
    assert activated.capabilities.intermediate_derived_grads is True


def test_intermediate_derived_grads_are_tgrad_grads_and_validate(activated: Any) -> None:
    """Each computed op gets d(sum of the output)/d(op), from tgrad's engine: the input's equals
    tgrad.grad's bit for bit, and validation checks every one against torch float64 autograd."""
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad", grad_options=provider.GradOptions(intermediate_grads=True))
    computed = [op.label for op in tr if not op.is_input]
    assert list(tr.intermediate_derived_grads.keys()) == computed
    relu = tr["relu_1_4"]
    assert relu.derived_grad.shape == (2, 16) and relu.derived_grad.dtype == np.float32
    off = relu.out.numpy().astype(np.float32) == 0
    assert off.any() and np.all(tr["add_1_3"].derived_grad[off] == 0)  # through relu's mask
    want = tgrad.grad(lambda t: mlp(t).sum(dtype="float32"), grad_dtype="float32")(x).numpy()
    assert np.array_equal(tr.derived_grads["inputs.0"].grad, want)
    assert np.array_equal(tr["add_2_7"].derived_grad, np.ones((2, 4), np.float32))  # the sum's seed
    status = tr.validate()
    assert status.state == "passed" and "derived gradients: 8 of 8" in status.message, status.message
    assert [d["state"] for d in status.decisions if d.get("check") == "derived_grad"] == ["passed"] * 8
    assert not x.requires_grad and not any(t.requires_grad for t in (x, relu.out))  # marks restored


def test_a_tampered_derived_grad_is_named(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    tr = tl.trace(mlp, x, backend="tgrad", grad_options=provider.GradOptions(intermediate_grads=True))
    tr["matmul_1_2"].derived_grad[0, 0] += 1.0 + abs(float(tr["matmul_1_2"].derived_grad[0, 0]))
    assert tr.validate_forward_pass() is False
    status = tr.validation_replay_status
    assert status.message.startswith("Derived gradient validation failed at matmul_1_2 (matmul)"), status.message
    assert "index (0, 0)" in status.message
    failure = last_validation_failure()
    assert failure is not None and failure.op_label == "matmul_1_2" and failure.check == "derived_grad"


def test_loss_fn_and_input_grad_argnums(activated: Any) -> None:
    rng = np.random.default_rng(3)
    a, b = _tensor(rng, 3, 5), _tensor(rng, 5, 2)

    def fn(p: tgrad.Tensor, q: tgrad.Tensor) -> tgrad.Tensor:
        return (p @ q).tanh() * q.sum()

    def loss(out: tgrad.Tensor) -> tgrad.Tensor:
        return (out * out).mean(dtype="float32")

    tr = tl.trace(fn, (a, b), backend="tgrad",
                  grad_options=provider.GradOptions(loss_fn=loss, input_grad_argnums=(1,), intermediate_grads=True))
    assert list(tr.derived_grads.keys()) == ["inputs.1"]
    want = tgrad.grad(lambda q: loss(fn(a, q)), grad_dtype="float32")(b).numpy()
    assert np.array_equal(tr.derived_grads["inputs.1"].grad, want)
    status = tr.validate()
    rows = {d["label"]: d["state"] for d in status.decisions if d.get("check") == "derived_grad"}
    assert status.state == "passed" and rows["tanh_1_2"] == "passed" and rows["mul_1_4"] == "skipped"  # the seed
    only_inputs = tl.trace(fn, (a, b), backend="tgrad", grad_options=provider.GradOptions(loss_fn=loss))
    assert list(only_inputs.derived_grads.keys()) == ["inputs.0", "inputs.1"]
    assert len(only_inputs.intermediate_derived_grads) == 0


def test_a_view_sharing_its_buffer_gets_no_record(activated: Any) -> None:
    """x @ x.T: the engine's cotangent belongs to x's buffer, which matmul also reads directly, so
    the transpose alone has no gradient of its own to give; it is left out, not recorded wrong."""
    _, x = _tutorial_mlp()
    tr = tl.trace(lambda t: (t @ t.T).relu(), x, backend="tgrad",
                  grad_options=provider.GradOptions(intermediate_grads=True))
    assert list(tr.intermediate_derived_grads.keys()) == ["matmul_1_2", "relu_1_3"]
    assert tr.validate().state == "passed"


def test_grad_options_refusals(activated: Any) -> None:
    mlp, x = _tutorial_mlp()
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="GradOptions"):
        tl.trace(mlp, x, backend="tgrad", grad_options=3)
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="one-element"):
        tl.trace(mlp, x, backend="tgrad", grad_options=provider.GradOptions(loss_fn=lambda out: out))
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="input_grad_argnums"):
        tl.trace(mlp, x, backend="tgrad", grad_options=provider.GradOptions(input_grad_argnums=(4,)))
    # torchlens' own tinygrad GradOptions has the same fields and is taken as is.
    from torchlens.backends.tinygrad import GradOptions as TinygradGradOptions

    tr = tl.trace(mlp, x, backend="tgrad", grad_options=TinygradGradOptions(intermediate_grads=True))
    assert "relu_1_4" in tr.intermediate_derived_grads


def test_a_kind_without_a_gradient_rule_is_refused_whole(activated: Any) -> None:
    """A kind with no vjp row (a derivative op's own derivative: second order is not supported):
    NoGradientRuleError, naming it, and no trace at all."""
    rng = np.random.default_rng(4)
    x = _tensor(rng, 2, 8)

    def fn(t: Any) -> Any:
        return tgrad.softmax_backward(tgrad.softmax(t, 1), t, 1)

    with pytest.raises(tgrad.errors.NoGradientRuleError,
                       match="grad_options cannot be honoured: grad: softmax_backward has no gradient rule"):
        tl.trace(fn, x, backend="tgrad", grad_options=provider.GradOptions(intermediate_grads=True))
    assert tl.trace(fn, x, backend="tgrad").validate().state in ("passed", "unverified")  # forward alone works


def test_docs_grad_example_runs(declared: None) -> None:
    """docs/interop.md's derived-gradient block, which runs alone (it builds the tutorial's MLP)."""
    text = (ROOT / "docs" / "interop.md").read_text()
    section = text[text.index("## torchlens ("):]
    block = section.split("```python\n")[2].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/interop.md", "exec"), namespace)
    assert list(namespace["grads"].keys()) == [label for label in namespace["labels"]
                                               if not label.startswith(("input", "captured"))]
    assert namespace["d_relu"].shape == (2, 16) and namespace["d_x"].shape == (2, 8)
    assert namespace["status"].state == "passed"
    namespace.clear()
