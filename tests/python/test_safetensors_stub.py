"""Stubs of a checkpoint (issues 22 and 35): the shapes are in the types, so mypy --strict and
pyright reject a product that does not fit the checkpoint; each prefix has its own class, named by
its path; `layers` is a sequence of one item class; each node's `load()` gives the same typed tree,
read at once; the Checkpoint class has the documented API; the TYPE_CHECKING recipe runs; and
`python -m tgrad safetensors-stub MODEL_DIR` types a Hugging Face model directory (a small Llama
written with tgrad.safetensors.save, with config.json, whole or in shards with their index)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import tgrad
from tgrad.safetensors import TensorInfo
from tgrad.safetensors_stub import stub_text as stub_text_of
from typecheckers import TGRAD_ROOT, mypy_errors, pyright_errors

SHARDS = {
    "model-00001-of-00002.safetensors": {
        "model.embed_tokens.weight": (16, 8), "model.layers.0.self_attn.q_proj.weight": (8, 8),
        "model.layers.0.mlp.up_proj.weight": (24, 8), "model.layers.0.mlp.down_proj.weight": (8, 24)},
    "model-00002-of-00002.safetensors": {
        "model.layers.1.self_attn.q_proj.weight": (8, 8), "model.layers.1.mlp.up_proj.weight": (24, 8),
        "model.layers.1.mlp.down_proj.weight": (8, 24), "model.norm.weight": (8,), "lm_head.weight": (16, 8)},
}

USE = '''"""The documented recipe: the stub is imported for checkers only."""
import sys
from typing import TYPE_CHECKING, Literal, assert_type, cast

import numpy as np

import tgrad
from tgrad import Tensor

if TYPE_CHECKING:
    from model import Checkpoint


def forward(w: "Checkpoint", x: Tensor[Literal[4], Literal[8]]) -> Tensor[Literal[4], Literal[16]]:
    layer = w.model.layers[0]
    h = (x @ layer.mlp.up_proj.weight.T).silu()
    assert_type(h, Tensor[Literal[4], Literal[24]])
    y = h @ layer.mlp.down_proj.weight.T + w.model.norm.weight
    return y @ w.lm_head.weight.T


def main(path: str) -> None:
    with cast("Checkpoint", tgrad.safetensors.open(path)) as w:
        assert w.schema["lm_head.weight"].shape == (16, 8)
        assert len(w.model.layers) == 2 and "model.norm.weight" in w
        tensors: dict[str, Tensor] = w.load(["model.norm.weight"])
        x = tgrad.typed(Tensor.from_numpy(np.ones((4, 8), np.float32)), Tensor[Literal[4], Literal[8]])
        y = forward(w, x)
        print(y.shape, w["lm_head.weight"].shape, sorted(tensors), [layer.mlp.up_proj.weight.shape for layer in w.model.layers])


if __name__ == "__main__":
    main(sys.argv[1])
'''

BAD = '''from typing import TYPE_CHECKING

from tgrad import Tensor

if TYPE_CHECKING:
    from model import Checkpoint


def forgot_the_transpose(w: "Checkpoint", x: Tensor) -> Tensor:
    return x @ w.model.layers[0].mlp.up_proj.weight @ w.model.layers[1].mlp.up_proj.weight  # expect-error


def wrong_layer(w: "Checkpoint") -> Tensor:
    return w.model.layers[0].mlp.up_proj.weight @ w.model.layers[0].mlp.up_proj.weight  # expect-error


def lm_head_is_not_an_embedding(w: "Checkpoint") -> None:
    w.lm_head.embed_tokens  # expect-error
'''


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    weight_map = {}
    for shard, shapes in SHARDS.items():
        save_file({n: np.zeros(s, ml_dtypes.bfloat16) for n, s in shapes.items()}, str(ckpt / shard))
        weight_map.update({n: shard for n in shapes})
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return ckpt


def _project(tmp_path: Path, sharded: Path, **files: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "model.pyi").write_text(tgrad.safetensors.stub(sharded))
    for name, text in files.items():
        (work / f"{name}.py").write_text(text)
    return work


def test_stub_types_each_tensor_with_its_shape_and_names_classes_by_path(sharded: Path) -> None:
    text = tgrad.safetensors.stub(sharded)
    assert "    weight: Tensor[Literal[24], Literal[8]]" in text
    assert "    weight: Tensor[Literal[8]]" in text
    # lm_head and embed_tokens hold the same shapes: still two classes, each named by its path
    assert "    lm_head: LmHead\n" in text and "    embed_tokens: ModelEmbedTokens\n" in text
    assert "class ModelLayersItemMlpUpProj(Protocol):" in text
    assert "def __getitem__(self, index: int) -> ModelLayersItem: ..." in text
    for api in ("    schema: dict[str, TensorInfo]", "    def __getitem__(self, name: str) -> Tensor: ...",
                "    def load(self, names: Sequence[str] | None = None) -> dict[str, Tensor]: ...",
                "    def __enter__(self) -> Self: ..."):
        assert api in text.split("class Checkpoint(Protocol):")[1].split("\nclass ")[0], api
    compile(text, "model.pyi", "exec")


def test_the_documented_recipe_runs(sharded: Path, tmp_path: Path) -> None:
    work = _project(tmp_path, sharded, use=USE)
    run = subprocess.run([sys.executable, "use.py", str(sharded)], cwd=work, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [TGRAD_ROOT, os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(4, 16) (16, 8) ['model.norm.weight'] [(24, 8), (24, 8)]"


@pytest.mark.typecheck
@pytest.mark.parametrize("checker", [mypy_errors, pyright_errors], ids=["mypy", "pyright"])
def test_checkers_accept_the_recipe_and_reject_mismatched_products(checker: Any, sharded: Path,
                                                                   tmp_path: Path) -> None:
    work = _project(tmp_path, sharded, use=USE, bad=BAD)
    found = checker(work)
    marked = {("bad.py", n) for n, line in enumerate(BAD.splitlines(), 1) if "# expect-error" in line}
    assert set(found) == marked, found


# ---- a Hugging Face Llama directory, through the CLI (issue 35) -------------------------------

#: A small Llama: hidden 64, 4 heads of 16, 2 KV heads (grouped-query attention: k_proj and v_proj
#: are 32 x 64), intermediate 176, vocabulary 128, two layers, embeddings not tied.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 128,
         "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _llama_shapes() -> dict[str, tuple[int, ...]]:
    d, f, v, kv = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["vocab_size"], 32
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d)}
    for i in range(LLAMA["num_hidden_layers"]):
        at = f"model.layers.{i}."
        shapes.update({at + "input_layernorm.weight": (d,), at + "self_attn.q_proj.weight": (d, d),
                       at + "self_attn.k_proj.weight": (kv, d), at + "self_attn.v_proj.weight": (kv, d),
                       at + "self_attn.o_proj.weight": (d, d), at + "post_attention_layernorm.weight": (d,),
                       at + "mlp.gate_proj.weight": (f, d), at + "mlp.up_proj.weight": (f, d),
                       at + "mlp.down_proj.weight": (d, f)})
    shapes.update({"model.norm.weight": (d,), "lm_head.weight": (v, d)})
    return shapes


def _llama_dir(root: Path, sharded: bool) -> Path:
    """A model directory as transformers writes it, made with tgrad's own writer."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps(LLAMA))
    gen = np.random.default_rng(35)
    tensors = {n: tgrad.Tensor.from_numpy(gen.standard_normal(s).astype(np.float32))
               for n, s in _llama_shapes().items()}
    if not sharded:
        tgrad.safetensors.save(root / "model.safetensors", tensors, {"format": "pt"})
        return root
    names = list(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:12], "model-00002-of-00002.safetensors": names[12:]}
    for shard, part in halves.items():
        tgrad.safetensors.save(root / shard, {n: tensors[n] for n in part}, {"format": "pt"})
    weight_map = {n: shard for shard, part in halves.items() for n in part}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root


LLAMA_USE = '''"""A Llama layer's products against the checkpoint's shapes, and its subtree loader."""
import sys
from typing import TYPE_CHECKING, Literal, assert_type, cast

import numpy as np

import tgrad
from tgrad import Tensor

if TYPE_CHECKING:
    from model import Checkpoint, ModelLayersItem


def queries(weights: "Checkpoint", x: Tensor[Literal[4], Literal[64]]) -> Tensor[Literal[4], Literal[64]]:
    assert_type(weights.model.layers[0].self_attn.q_proj.weight, Tensor[Literal[64], Literal[64]])
    q = x @ weights.model.layers[0].self_attn.q_proj.weight.T
    k = x @ weights.model.layers[0].self_attn.k_proj.weight.T
    assert_type(k, Tensor[Literal[4], Literal[32]])
    return q


def mlp(layer: "ModelLayersItem", x: Tensor[Literal[4], Literal[64]]) -> Tensor[Literal[4], Literal[64]]:
    h = (x @ layer.mlp.gate_proj.weight.T).silu() * (x @ layer.mlp.up_proj.weight.T)
    assert_type(h, Tensor[Literal[4], Literal[176]])
    return h @ layer.mlp.down_proj.weight.T


def main(path: str) -> None:
    with cast("Checkpoint", tgrad.safetensors.open(path)) as weights:
        x = tgrad.typed(Tensor.from_numpy(np.ones((4, 64), np.float32)), Tensor[Literal[4], Literal[64]])
        layer = weights.model.layers[1].load()       # read now, then walked in memory
        y = mlp(layer, queries(weights, x))
        names = sorted(layer.tensors())
        rest = [item.self_attn.o_proj.weight.shape for item in weights.model.layers[1:]]
    # the checkpoint is closed: the loaded subtree still answers
    print(y.shape, len(weights.model.layers), len(names), names[0], rest, layer.mlp.down_proj.weight.shape)


if __name__ == "__main__":
    main(sys.argv[1])
'''

#: Products that do not fit the checkpoint: each marked line must be an error in both checkers,
#: and none of them may be once the stub's shapes are erased (bad_erased.py against model_erased).
LLAMA_BAD = '''from typing import TYPE_CHECKING, Literal

from tgrad import Tensor

if TYPE_CHECKING:
    from model import Checkpoint


def queries_into_down_proj(weights: "Checkpoint", x: Tensor[Literal[4], Literal[64]]) -> Tensor:
    q = x @ weights.model.layers[0].self_attn.q_proj.weight.T
    return q @ weights.model.layers[0].mlp.down_proj.weight.T  # expect-error


def grouped_keys_into_o_proj(weights: "Checkpoint", x: Tensor[Literal[4], Literal[64]]) -> Tensor:
    k = x @ weights.model.layers[0].self_attn.k_proj.weight.T
    return k @ weights.model.layers[1].self_attn.o_proj.weight.T  # expect-error


def forgot_the_transpose(weights: "Checkpoint", x: Tensor[Literal[4], Literal[64]]) -> Tensor:
    return x @ weights.model.layers[-1].mlp.up_proj.weight  # expect-error


def a_loaded_subtree_is_typed_too(weights: "Checkpoint") -> Tensor:
    layer = weights.model.layers[0].load()
    return layer.mlp.up_proj.weight @ layer.mlp.down_proj.weight.T  # expect-error
'''

_SHAPED = re.compile(r"Tensor\[Literal\[\d+\](?:, Literal\[\d+\])*\]")


def _cli_stub(model_dir: Path) -> str:
    run = subprocess.run([sys.executable, "-m", "tgrad", "safetensors-stub", str(model_dir)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("sharded", [False, True], ids=["model.safetensors", "sharded"])
def test_the_cli_types_a_llama_directory_as_a_tree(sharded: bool, tmp_path: Path) -> None:
    model_dir = _llama_dir(tmp_path / "llama", sharded)
    text = _cli_stub(model_dir)
    assert text == tgrad.safetensors.stub(model_dir)
    compile(text, "model.pyi", "exec")
    classes = dict(re.findall(r"class (\w+)\(Protocol\):\n((?:    .*\n|\n(?!\n))*)", text))
    assert "    model: Model\n" in classes["Root"] and "    lm_head: LmHead\n" in classes["Root"]
    assert "    layers: ModelLayers\n" in classes["Model"]
    for line in ("    def __getitem__(self, index: int) -> ModelLayersItem: ...",
                 "    def __getitem__(self, index: slice) -> list[ModelLayersItem]: ...",
                 "    def __iter__(self) -> Iterator[ModelLayersItem]: ..."):
        assert line in classes["ModelLayers"], line
    assert "    self_attn: ModelLayersItemSelfAttn\n" in classes["ModelLayersItem"]
    assert "    weight: Tensor[Literal[64], Literal[64]]\n" in classes["ModelLayersItemSelfAttnQProj"]
    assert "    weight: Tensor[Literal[32], Literal[64]]\n" in classes["ModelLayersItemSelfAttnKProj"]
    assert "    weight: Tensor[Literal[64], Literal[176]]\n" in classes["ModelLayersItemMlpDownProj"]
    assert "    weight: Tensor[Literal[64]]\n" in classes["ModelLayersItemInputLayernorm"]
    for name, body in classes.items():  # every node has Node's API, load() giving its own type
        assert name == "Checkpoint" or "    def load(self) -> Self: ..." in body and "    def tensors(self) -> dict[str, Tensor]: ..." in body, name
    # a layer's 9 tensors once (the layers share one item class), embed_tokens, norm and lm_head
    assert len(_SHAPED.findall(text)) == 12 and ": Tensor\n" not in text


def test_a_loaded_subtree_is_the_same_tree_in_memory(tmp_path: Path) -> None:
    model_dir = _llama_dir(tmp_path / "llama", sharded=True)
    w = tgrad.safetensors.open(model_dir)
    layer = w.model.layers[1].load()
    assert layer.load() is layer and "loaded" in repr(layer)
    assert set(layer.tensors()) == {n for n in w.keys() if n.startswith("model.layers.1.")} == set(layer.names())
    down = layer.mlp.down_proj.weight
    assert down is layer.mlp.down_proj.weight  # read once, by load()
    w.close()
    with pytest.raises(tgrad.errors.InvalidHandleError):
        w.model.layers[1].mlp.down_proj.weight
    assert layer.mlp.down_proj.weight.to_bytes() == down.to_bytes() and down.shape == (64, 176)
    assert [t.to_bytes() for t in layer.tensors().values()] == [
        t.to_bytes() for t in tgrad.safetensors.open(model_dir).model.layers[1].tensors().values()]


def test_the_llama_recipe_runs(tmp_path: Path) -> None:
    model_dir = _llama_dir(tmp_path / "llama", sharded=True)
    work = tmp_path / "work"
    work.mkdir()
    (work / "model.pyi").write_text(_cli_stub(model_dir))
    (work / "use.py").write_text(LLAMA_USE)
    run = subprocess.run([sys.executable, "use.py", str(model_dir)], cwd=work, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [TGRAD_ROOT, os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(4, 64) 2 9 model.layers.1.input_layernorm.weight [(64, 64)] (64, 176)"


@pytest.mark.typecheck
@pytest.mark.parametrize("checker, codes", [(mypy_errors, {"operator", "arg-type"}),
                                            (pyright_errors, {"reportOperatorIssue"})], ids=["mypy", "pyright"])
def test_checkers_hold_a_llama_product_to_the_checkpoint_shapes(checker: Any, codes: set[str], tmp_path: Path) -> None:
    model_dir = _llama_dir(tmp_path / "llama", sharded=True)
    work = tmp_path / "work"
    work.mkdir()
    stub_text = _cli_stub(model_dir)
    # the same checkpoint's stub with its shapes lost: every tensor a bare Tensor
    schema = tgrad.safetensors.open(model_dir).schema
    erased = stub_text_of({n: TensorInfo(info.dtype, ()) for n, info in schema.items()}, "erased")
    assert "Literal[" not in erased and erased.count("weight: Tensor\n") == 12
    (work / "model.pyi").write_text(stub_text)
    (work / "model_erased.pyi").write_text(erased)
    (work / "use.py").write_text(LLAMA_USE)
    (work / "bad.py").write_text(LLAMA_BAD)
    (work / "bad_erased.py").write_text(LLAMA_BAD.replace("from model import", "from model_erased import"))
    # stubs of other trees must be clean too: no sequence (nothing to index), a sequence at the top
    # whose items disagree on their extent (no Literal), a 0-d tensor and names that are not attributes
    for name, shapes in {"flat": {"w": (2, 3), "b": ()}, "top": {"0.weight": (2,), "1.weight": (3,), "1.bias": ()},
                         "odd": {"0": (1,), "class.load": (2,), "load": (4,)}}.items():
        (work / f"model_{name}.pyi").write_text(stub_text_of({n: TensorInfo("BF16", s) for n, s in shapes.items()}, name))
    found = checker(work)
    marked = {("bad.py", n) for n, line in enumerate(LLAMA_BAD.splitlines(), 1) if "# expect-error" in line}
    # Exactly the marked lines of bad.py: use.py passes, and against the erased stub the same lines
    # pass too, so the errors come from the checkpoint's shapes.
    assert set(found) == marked, found
    assert all(found[key] & codes for key in marked), found  # a product's error, not another one
