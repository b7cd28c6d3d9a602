"""Stubs of a sharded checkpoint (issue 22): the shapes are in the types, so mypy --strict and
pyright reject a product that does not fit the checkpoint; each prefix has its own class, named by
its path; the Checkpoint class has the documented API; the TYPE_CHECKING recipe runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import tgrad
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
