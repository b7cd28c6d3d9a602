"""tgrad.nn.Module and the containers: parameters registered by assignment and named by dotted
path as torch names them, state_dict / load_state_dict / load_checkpoint checking every name and
shape before changing anything (errors name the path), torch's repr, calling runs forward.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tgrad
import tgrad.nn.functional as F
from tgrad import Tensor, errors, nn


def bits(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def tensor(rng: np.random.Generator, *shape: int) -> Tensor:
    return Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))


def linear(rng: np.random.Generator, in_f: int, out_f: int, bias: bool = True) -> nn.Linear:
    return nn.Linear.from_tensors(tensor(rng, out_f, in_f), tensor(rng, out_f) if bias else None)


class Attention(nn.Module):
    def __init__(self, rng: np.random.Generator, d: int) -> None:
        super().__init__()
        self.q_proj = linear(rng, d, d, bias=False)
        self.o_proj = linear(rng, d, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.o_proj(F.relu(self.q_proj(x)))


class Layer(nn.Module):
    def __init__(self, rng: np.random.Generator, d: int) -> None:
        super().__init__()
        self.self_attn = Attention(rng, d)
        self.scale = 2  # a plain attribute, not a parameter

    def forward(self, x: Tensor) -> Tensor:
        return self.self_attn(x) * self.scale


class Model(nn.Module):
    def __init__(self, rng: np.random.Generator, d: int = 4, n: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(rng, d) for _ in range(n))
        self.head = linear(rng, d, 3)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


PATHS = ["layers.0.self_attn.q_proj.weight", "layers.0.self_attn.o_proj.weight", "layers.0.self_attn.o_proj.bias",
         "layers.1.self_attn.q_proj.weight", "layers.1.self_attn.o_proj.weight", "layers.1.self_attn.o_proj.bias",
         "head.weight", "head.bias"]


# ---- registration and paths -----------------------------------------------------------------------
def test_parameters_are_named_by_dotted_path_in_assignment_order(rng: np.random.Generator) -> None:
    model = Model(rng)
    assert [name for name, _ in model.named_parameters()] == PATHS
    assert list(model.state_dict()) == PATHS
    assert [t.shape for t in model.parameters()] == [(4, 4), (4, 4), (4,)] * 2 + [(3, 4), (3,)]
    assert model.layers[1].self_attn.q_proj.bias is None  # registered as absent, not in state_dict
    assert [name for name, _ in model.named_modules()][:4] == ["", "layers", "layers.0", "layers.0.self_attn"]
    assert [name for name, _ in model.named_children()] == ["layers", "head"]
    assert model.layers[0].scale == 2 and "scale" not in model.layers[0].state_dict()
    assert model.state_dict()["head.weight"] is model.head.weight  # the tensors themselves
    assert list(model.state_dict(prefix="model.")) == [f"model.{p}" for p in PATHS]


def test_a_tied_tensor_is_one_parameter_under_two_paths(rng: np.random.Generator) -> None:
    model = nn.Sequential(linear(rng, 4, 4, bias=False), linear(rng, 4, 4, bias=False))
    model[1].weight = model[0].weight
    assert [name for name, _ in model.named_parameters()] == ["0.weight"]
    assert list(model.state_dict()) == ["0.weight", "1.weight"]


def test_buffers_are_state_but_not_parameters(rng: np.random.Generator) -> None:
    layer = linear(rng, 4, 2)
    table = tensor(rng, 8)
    layer.register_buffer("table", table)
    assert layer.table is table and list(layer.buffers()) == [table]
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert list(layer.state_dict()) == ["weight", "bias", "table"]
    other = tensor(rng, 8)
    layer.table = other  # assigning a registered buffer keeps it a buffer
    assert list(layer.buffers()) == [other] and len(list(layer.parameters())) == 2


def test_registration_refuses_what_is_not_a_tensor_or_module(rng: np.random.Generator) -> None:
    class Forgot(nn.Module):
        def __init__(self) -> None:
            self.w = Tensor.from_numpy(np.ones(2, np.float32))  # no super().__init__()

    with pytest.raises(errors.InvalidArgumentError, match=r"super\(\).__init__\(\)"):
        Forgot()
    layer = linear(rng, 4, 2)
    with pytest.raises(errors.InvalidArgumentError, match="Linear.weight"):
        layer.weight = np.ones((2, 4), np.float32)  # type: ignore[assignment]
    with pytest.raises(errors.InvalidArgumentError):
        layer.register_parameter("w", np.ones(2))  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        layer.register_buffer("a.b", None)
    with pytest.raises(errors.InvalidArgumentError):
        layer.add_module("m", 3)  # type: ignore[arg-type]
    assert isinstance(layer.weight, Tensor)
    del layer.bias
    assert list(layer.state_dict()) == ["weight"]
    with pytest.raises(AttributeError):
        layer.nope  # noqa: B018


def test_attributes_read_the_registries_however_they_are_written(rng: np.random.Generator) -> None:
    """A registered value is a plain attribute read (the registries mirror it into the instance
    dict), and every way of changing a registry is what the attribute reads: assignment,
    register_*, del, load_state_dict, Module.to, a registry written directly as torch code does,
    and a deep copy (whose registries mirror into the copy, not the original)."""
    import copy

    model = Model(rng)
    layer = model.layers[0].self_attn.o_proj
    assert "weight" in vars(layer) and layer.weight is layer._parameters["weight"]
    assert model.layers[0].self_attn is vars(model.layers[0])["self_attn"]
    w2 = tensor(rng, 4, 4)
    layer._parameters["weight"] = w2  # as torch code may write it
    assert layer.weight is w2 and dict(layer.named_parameters())["weight"] is w2
    layer._parameters.update({"bias": None})
    assert layer.bias is None and list(layer.state_dict()) == ["weight"]
    layer.register_buffer("table", tensor(rng, 2))
    layer._buffers.pop("table")
    with pytest.raises(AttributeError):
        layer.table  # noqa: B018
    state = {k: Tensor.from_numpy(np.zeros(v.shape, np.float32)) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    assert model.head.weight is state["head.weight"]
    twin = copy.deepcopy(model)
    twin.head.weight = tensor(rng, 3, 4)
    assert model.head.weight is state["head.weight"] and twin.head.weight is not model.head.weight
    twin.head._parameters["bias"] = tensor(rng, 3)
    assert twin.head.bias is twin.head._parameters["bias"] and model.head.bias is state["head.bias"]
    del twin.head.bias
    assert "bias" not in vars(twin.head) and "bias" not in twin.head._parameters


# ---- state dicts --------------------------------------------------------------------------------
def test_state_dict_round_trip_gives_the_same_bytes(rng: np.random.Generator) -> None:
    source, target = Model(rng), Model(rng)
    x = tensor(rng, 5, 4)
    assert not np.array_equal(bits(source(x)), bits(target(x)))
    assert target.load_state_dict(source.state_dict()) == nn.IncompatibleKeys([], [])
    assert np.array_equal(bits(target(x)), bits(source(x)))
    assert target.layers[1].self_attn.o_proj.bias is source.layers[1].self_attn.o_proj.bias


def test_load_errors_name_the_path_and_change_nothing(rng: np.random.Generator) -> None:
    model = Model(rng)
    before = model.state_dict()
    good = Model(rng).state_dict()
    wrong_shape = {**good, "layers.1.self_attn.q_proj.weight": tensor(rng, 4, 5)}
    with pytest.raises(errors.ShapeMismatchError,
                       match=r"^layers\.1\.self_attn\.q_proj\.weight: shape \[4, 4\] expected, got \[4, 5\]$"):
        model.load_state_dict(wrong_shape)
    missing = {k: v for k, v in good.items() if k != "layers.0.self_attn.o_proj.bias"}
    with pytest.raises(errors.TensorNotFoundError, match=r"^layers\.0\.self_attn\.o_proj\.bias: not in"):
        model.load_state_dict(missing)
    with pytest.raises(errors.InvalidArgumentError, match=r"^layers\.0\.self_attn\.q_proj\.bias: .*not a parameter"):
        model.load_state_dict({**good, "layers.0.self_attn.q_proj.bias": tensor(rng, 4)})
    with pytest.raises(errors.InvalidArgumentError, match=r"^head\.bias: expected a tgrad.Tensor"):
        model.load_state_dict({**good, "head.bias": np.zeros(3, np.float32)})  # type: ignore[dict-item]
    with pytest.raises(errors.InvalidArgumentError):
        model.load_state_dict([("head.bias", good["head.bias"])])  # type: ignore[arg-type]
    after = model.state_dict()
    assert all(after[k] is before[k] for k in PATHS)  # every refusal left the model as it was


def test_load_not_strict_loads_what_matches_and_reports_the_rest(rng: np.random.Generator) -> None:
    model, other = Model(rng), Model(rng)
    partial = {"head.weight": other.head.weight, "extra.weight": tensor(rng, 2)}
    result = model.load_state_dict(partial, strict=False)
    assert result.missing_keys == [p for p in PATHS if p != "head.weight"]
    assert result.unexpected_keys == ["extra.weight"]
    assert model.head.weight is other.head.weight


def test_load_casts_to_the_parameters_dtype(rng: np.random.Generator) -> None:
    layer = linear(rng, 4, 2)
    wide = Tensor.from_numpy(rng.standard_normal((2, 4)).astype(np.float32), dtype="float32")
    layer.load_state_dict({"weight": wide, "bias": layer.bias})  # type: ignore[dict-item]
    assert layer.weight.dtype == tgrad.bfloat16
    assert np.array_equal(bits(layer.weight), bits(wide.to(tgrad.bfloat16)))
    layer.to(tgrad.float32)
    assert {t.dtype for t in layer.parameters()} == {tgrad.float32}


def test_load_checkpoint_reads_prefixed_names_after_checking_the_schema(tmp_path: Path,
                                                                           rng: np.random.Generator) -> None:
    pytest.importorskip("safetensors")
    source, target = Model(rng), Model(rng)
    path = tmp_path / "model.safetensors"
    tgrad.safetensors.save(path, {**source.state_dict(prefix="model."), "lm.weight": tensor(rng, 2)})
    assert target.load_checkpoint(path, "model") == nn.IncompatibleKeys([], [])
    x = tensor(rng, 3, 4)
    assert np.array_equal(bits(target(x)), bits(source(x)))
    layer = linear(rng, 4, 3)
    assert layer.load_checkpoint(tgrad.safetensors.open(path), "model.head") == nn.IncompatibleKeys([], [])
    assert np.array_equal(bits(layer.weight), bits(source.head.weight))

    # Changed under the open checkpoint: any read is refused, so the refusals below come from the
    # schema alone, before a tensor is read.
    ckpt = tgrad.safetensors.open(path)
    tgrad.safetensors.save(path, {"x": tensor(rng, 2)})
    with pytest.raises(errors.ShapeMismatchError, match=r"^model\.head\.weight: shape \[4, 4\] expected, got \[3, 4\]$"):
        linear(rng, 4, 4).load_checkpoint(ckpt, "model.head")
    with pytest.raises(errors.TensorNotFoundError, match=r"^model\.layers\.0\.self_attn\.q_proj\.bias: not in "):
        linear(rng, 4, 4).load_checkpoint(ckpt, "model.layers.0.self_attn.q_proj")
    with pytest.raises(errors.InvalidArgumentError, match=r"^model\.head\.bias: in .* not a parameter"):
        linear(rng, 4, 3, bias=False).load_checkpoint(ckpt, "model.head")
    with pytest.raises(errors.TensorNotFoundError, match=r"^model\.layers\.0\.q_proj\.weight: not in .*and 2 more"):
        Attention(rng, 4).load_checkpoint(ckpt, "model.layers.0")  # its names sit one level down
    with pytest.raises(errors.FileMalformedError, match="changed since it was opened"):
        Model(rng).load_checkpoint(ckpt, "model")
    with pytest.raises(errors.InvalidArgumentError):
        Model(rng).load_checkpoint(42, "model")  # type: ignore[arg-type]


# ---- containers and running ------------------------------------------------------------------------
def test_sequential_runs_its_modules_in_order(rng: np.random.Generator) -> None:
    up, down = linear(rng, 4, 8), linear(rng, 8, 2)
    model = nn.Sequential(up, nn.GELU(approximate="tanh"), down)
    x = tensor(rng, 3, 4)
    assert np.array_equal(bits(model(x)), bits(down(up(x).gelu(approximate="tanh"))))
    assert len(model) == 3 and model[0] is up and model[-1] is down
    head = model[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2
    assert np.array_equal(bits(head(x)), bits(up(x).gelu(approximate="tanh")))
    model[1] = nn.ReLU()
    assert np.array_equal(bits(model(x)), bits(down(up(x).relu())))
    with pytest.raises(errors.IndexOutOfRangeError):
        model[3]  # noqa: B018
    with pytest.raises(errors.InvalidArgumentError):
        model.append(up.weight)  # type: ignore[arg-type]


def test_activation_modules_are_the_functional_ops(rng: np.random.Generator) -> None:
    x = tensor(rng, 2, 5)
    cases = [(nn.ReLU(), tgrad.relu(x)), (nn.GELU(), tgrad.gelu(x)), (nn.SiLU(), tgrad.silu(x)),
             (nn.Sigmoid(), tgrad.sigmoid(x)), (nn.Tanh(), tgrad.tanh(x)), (nn.Identity(), x),
             (nn.Dropout(0.1), x)]
    for module, want in cases:
        assert np.array_equal(bits(module(x)), bits(want)), module
    dropout = nn.Dropout(0.1).train()
    with pytest.raises(errors.InvalidArgumentError, match="no training"):
        dropout(x)
    assert dropout.eval()(x) is x


def test_a_module_without_forward_says_so() -> None:
    with pytest.raises(NotImplementedError, match="Module defines no forward"):
        nn.Module()(1)


def test_repr_is_torchs(rng: np.random.Generator) -> None:
    model = nn.Sequential(linear(rng, 4, 8), nn.ReLU(), nn.ModuleList([
        nn.RMSNorm(8), nn.LayerNorm((8,)), nn.Embedding.from_pretrained(tensor(rng, 10, 8), padding_idx=0),
        nn.GELU("tanh"), nn.Dropout(0.1)]))
    # torch 2.13 prints this model so (the same modules, built with torch.nn).
    assert repr(model) == """Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): ModuleList(
    (0): RMSNorm((8,), eps=None, elementwise_affine=True)
    (1): LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=True)
    (2): Embedding(10, 8, padding_idx=0)
    (3): GELU(approximate='tanh')
    (4): Dropout(p=0.1, inplace=False)
  )
)"""


def test_layers_from_checkpoint_take_their_sizes_from_the_schema(tmp_path: Path, rng: np.random.Generator) -> None:
    pytest.importorskip("safetensors")
    table, w, b = tensor(rng, 10, 4), tensor(rng, 4), tensor(rng, 4)
    path = tmp_path / "model.safetensors"
    tgrad.safetensors.save(path, {"embed_tokens.weight": table, "norm.weight": w, "ln.weight": w, "ln.bias": b,
                                  "odd.weight": w, "odd.bias": tensor(rng, 3), "flat.weight": w})
    ckpt = tgrad.safetensors.open(path)
    embed = nn.Embedding.from_checkpoint(ckpt, "embed_tokens", padding_idx=0)
    assert (embed.num_embeddings, embed.embedding_dim, embed.padding_idx) == (10, 4, 0)
    assert np.array_equal(bits(embed.weight), bits(table))
    norm = nn.RMSNorm.from_checkpoint(path, "norm", eps=1e-6)
    assert norm.normalized_shape == (4,) and norm.eps == 1e-6 and norm.weight is not None
    assert np.array_equal(bits(norm.weight), bits(w))
    ln = nn.LayerNorm.from_checkpoint(ckpt, "ln")
    assert ln.bias is not None and np.array_equal(bits(ln.bias), bits(b))
    assert nn.LayerNorm.from_checkpoint(ckpt, "norm").bias is None  # no norm.bias: none
    refusals = [(lambda: nn.Embedding.from_checkpoint(ckpt, "flat"), errors.ShapeMismatchError, "2-D"),
                (lambda: nn.Embedding.from_checkpoint(ckpt, "nope"), errors.TensorNotFoundError, "nope.weight"),
                (lambda: nn.RMSNorm.from_checkpoint(ckpt, "nope"), errors.TensorNotFoundError, "nope.weight"),
                (lambda: nn.LayerNorm.from_checkpoint(ckpt, "odd"), errors.ShapeMismatchError, r"'odd.bias' is \[3\]"),
                (lambda: nn.RMSNorm.from_checkpoint(ckpt, 3), errors.InvalidArgumentError, "prefix"),
                (lambda: nn.Embedding.from_checkpoint(42, "x"), errors.InvalidArgumentError, "Checkpoint")]
    for make, error, text in refusals:
        with pytest.raises(error, match=text):
            make()  # type: ignore[no-untyped-call]
