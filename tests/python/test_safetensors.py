"""tgrad.safetensors: checkpoints written by the safetensors package load through the typed schema
bit for bit, files tgrad writes load in the package, and every malformed-file case (MALFORMED below)
is refused with its typed error naming the file (and the tensor, where there is one)."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

safetensors = pytest.importorskip("safetensors")
import safetensors.numpy as stnp  # noqa: E402

import tgrad  # noqa: E402
from tgrad import errors  # noqa: E402
from tgrad import safetensors as tst  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
LAYERS = 3


def _weights(seed: int = 5) -> dict[str, np.ndarray]:
    gen = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {"model.embed_tokens.weight": gen.standard_normal((16, 8)).astype(BF16)}
    for i in range(LAYERS):
        for proj in ("q_proj", "k_proj", "v_proj"):
            out[f"model.layers.{i}.self_attn.{proj}.weight"] = gen.standard_normal((8, 8)).astype(BF16)
        out[f"model.layers.{i}.mlp.up_proj.weight"] = gen.standard_normal((12, 8)).astype(BF16)
        out[f"model.layers.{i}.input_layernorm.weight"] = gen.standard_normal(8).astype(np.float32)
    out["lm_head.weight"] = gen.standard_normal((16, 8)).astype(BF16)
    return out


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A sharded checkpoint as the safetensors package writes it, with an HF-style index."""
    weights = _weights()
    names = list(weights)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for shard, part in shards.items():
        stnp.save_file({n: weights[n] for n in part}, str(tmp_path / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return tmp_path, weights


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint16).tobytes()


# ---- interop ----------------------------------------------------------------------------------

def test_sharded_checkpoint_loads_through_the_schema_with_identical_bytes(checkpoint: Any) -> None:
    root, weights = checkpoint
    w = tst.open(root)
    assert set(w.schema) == set(weights)
    assert w.schema["model.layers.0.self_attn.q_proj.weight"] == ("BF16", (8, 8))
    assert w.schema["model.layers.1.input_layernorm.weight"] == tst.TensorInfo("F32", (8,))
    q = w.model.layers[0].self_attn.q_proj.weight
    assert isinstance(q, tgrad.Tensor)
    assert q.to_bytes() == _bits(weights["model.layers.0.self_attn.q_proj.weight"])
    assert len(w.model.layers) == LAYERS
    assert w.model.layers[-1].mlp.up_proj.weight.to_bytes() == _bits(weights[f"model.layers.{LAYERS - 1}.mlp.up_proj.weight"])
    for name, array in weights.items():
        if array.dtype == BF16:
            assert w[name].to_bytes() == _bits(array), name


def test_index_file_and_single_file_paths_open_too(checkpoint: Any) -> None:
    root, weights = checkpoint
    assert tst.open(root / "model.safetensors.index.json").keys() == list(json.loads(
        (root / "model.safetensors.index.json").read_text())["weight_map"])
    one = tst.open(root / "model-00001-of-00002.safetensors")
    assert set(one.keys()) < set(weights)


def test_subtree_load_reads_every_tensor_under_it(checkpoint: Any) -> None:
    root, weights = checkpoint
    w = tst.open(root, convert=True)
    layer = w.model.layers[1].load()
    tensors = layer.tensors()
    assert set(tensors) == {n for n in weights if n.startswith("model.layers.1.")}
    assert tensors["model.layers.1.self_attn.k_proj.weight"].to_bytes() == _bits(weights["model.layers.1.self_attn.k_proj.weight"])
    assert layer.self_attn.k_proj.weight is tensors["model.layers.1.self_attn.k_proj.weight"]
    assert set(w.model.layers[0].tensors()) == {n for n in weights if n.startswith("model.layers.0.")}


def test_a_run_of_items_is_a_slice(checkpoint: Any) -> None:
    w = tst.open(checkpoint[0])
    assert [layer.names()[0] for layer in w.model.layers[::-1]] == [
        f"model.layers.{i}.self_attn.q_proj.weight" for i in reversed(range(LAYERS))]
    assert [layer.names()[0] for layer in w.model.layers[1:]] == [
        f"model.layers.{i}.self_attn.q_proj.weight" for i in range(1, LAYERS)]
    assert w.model.layers[LAYERS:] == []


def test_f32_is_refused_unless_conversion_is_asked_for(checkpoint: Any) -> None:
    root, weights = checkpoint
    name = "model.layers.0.input_layernorm.weight"
    with pytest.raises(errors.DtypeConversionRefusedError, match="input_layernorm"):
        tst.open(root)[name]
    got = tst.open(root, convert=True)[name]
    assert got.to_bytes() == _bits(weights[name].astype(BF16))


def test_f16_converts_through_an_exact_widening(tmp_path: Path) -> None:
    a = np.random.default_rng(1).standard_normal(33).astype(np.float16)
    stnp.save_file({"h": a}, str(tmp_path / "h.safetensors"))
    got = tst.open(tmp_path / "h.safetensors", convert=True)["h"]
    assert got.to_bytes() == _bits(a.astype(np.float32).astype(BF16))


def test_integer_tensors_are_unsupported_even_with_convert(tmp_path: Path) -> None:
    stnp.save_file({"i": np.arange(4, dtype=np.int32)}, str(tmp_path / "i.safetensors"))
    with pytest.raises(errors.DtypeUnsupportedError, match="'i'"):
        tst.open(tmp_path / "i.safetensors", convert=True)["i"]


def test_files_tgrad_writes_load_in_the_package_with_identical_bytes(tmp_path: Path, bf16_bits: Any) -> None:
    a = tgrad.Tensor.from_bf16_bits(bf16_bits(5, 7))
    tensors = {"a": a, "a_t": a.T, "rev": a[::-1, 1::2]}
    tst.save(tmp_path / "out.safetensors", tensors, metadata={"by": "tgrad"})
    loaded = stnp.load_file(str(tmp_path / "out.safetensors"))
    for name, t in tensors.items():
        assert loaded[name].dtype == BF16 and loaded[name].shape == t.shape
        assert _bits(loaded[name]) == t.to_bytes()
    back = tst.open(tmp_path / "out.safetensors")
    assert back["a_t"].to_bytes() == a.T.to_bytes()


@pytest.mark.interop
def test_torch_reads_what_tgrad_writes(tmp_path: Path, bf16_bits: Any) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    a = tgrad.Tensor.from_bf16_bits(bf16_bits(4, 6))
    tst.save(tmp_path / "t.safetensors", {"w": a})
    t = load_file(str(tmp_path / "t.safetensors"))["w"]
    assert t.dtype == torch.bfloat16
    assert t.view(torch.int16).numpy().view(np.uint16).tobytes() == a.to_bytes()


def test_missing_tensor_name_is_a_typed_lookup(checkpoint: Any) -> None:
    w = tst.open(checkpoint[0])
    with pytest.raises(errors.TensorNotFoundError, match="nope"):
        w["nope"]
    with pytest.raises(errors.TensorNotFoundError):
        w.model.nope
    with pytest.raises(LookupError):
        w.model.layers[99]


def test_a_missing_attribute_is_an_attribute_error_so_getattr_defaults_work(checkpoint: Any) -> None:
    w = tst.open(checkpoint[0])
    assert getattr(w.model, "missing", "default") == "default"
    assert getattr(w, "missing", None) is None
    assert not hasattr(w.model.layers[0], "nope") and hasattr(w.model.layers[0], "mlp")
    with pytest.raises(AttributeError, match="'model.nope'") as info:
        w.model.nope
    assert isinstance(info.value, errors.TensorNotFoundError) and info.value.code == "tensor_not_found"


def test_stub_names_the_tensors_for_a_type_checker(checkpoint: Any, tmp_path: Path) -> None:
    text = tst.stub(checkpoint[0])
    compile(text, "model.pyi", "exec")
    assert "q_proj: " in text and "weight: Tensor" in text
    assert "def __getitem__(self, index: int) -> " in text
    out = subprocess.run([sys.executable, "-m", "tgrad", "safetensors-stub", str(checkpoint[0])],
                         capture_output=True, text=True, check=True)
    assert out.stdout == text


@pytest.mark.typecheck
def test_stub_type_checks_a_use_of_the_names(checkpoint: Any, tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    pkg = tmp_path / "typed"
    pkg.mkdir()
    (pkg / "model.pyi").write_text(tst.stub(checkpoint[0]))
    (pkg / "use.py").write_text(
        "from typing import cast\nimport tgrad\nfrom model import Checkpoint\n"
        "w = cast(Checkpoint, tgrad.safetensors.open('x'))\n"
        "ok: tgrad.Tensor = w.model.layers[0].self_attn.q_proj.weight\n"
        "bad = w.model.layers[0].self_attn.z_proj\n")
    # A separate process: mypy's in-process state would slow every later test's gc.collect.
    tgrad_dir = str(Path(tgrad.__file__).parents[1])
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                          "--follow-imports=silent", "use.py"], cwd=pkg, capture_output=True, text=True,
                         env={**os.environ, **({} if "-packages" in tgrad_dir else {"MYPYPATH": tgrad_dir})})
    stdout, status = run.stdout, run.returncode
    assert status == 1 and "z_proj" in stdout and stdout.count("error:") == 1, stdout


# ---- additions over the package ----------------------------------------------------------------

def _index(root: Path, weight_map: dict[str, str]) -> Path:
    path = root / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": weight_map}))
    return path


@pytest.mark.parametrize("shard", ["/etc/passwd", "../outside.safetensors", "sub/../../x.safetensors", "C:\\x.safetensors"])
def test_shard_paths_absolute_or_climbing_out_are_refused(tmp_path: Path, shard: str) -> None:
    _index(tmp_path, {"w": shard})
    with pytest.raises(errors.FileMalformedError, match=r"shard path .*(absolute|climbs).*'w'|tensor 'w'"):
        tst.open(tmp_path)


@pytest.mark.parametrize("shard", ["\u0000", "a\u0000.safetensors", "\ud800.safetensors"])
def test_shard_names_no_file_system_can_hold_are_refused(tmp_path: Path, shard: str) -> None:
    # found by the fuzz session: a NUL from a JSON escape reached os.stat as a bare ValueError
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(errors.FileMalformedError, match=r"shard .*(NUL|file system).*'w'|tensor 'w'"):
        tst.open(index)


def test_shard_missing_from_disk_is_named(tmp_path: Path) -> None:
    _index(tmp_path, {"w": "gone.safetensors"})
    with pytest.raises(errors.FileMissingError, match="gone.safetensors.*'w'"):
        tst.open(tmp_path)


def test_tensor_named_in_the_index_but_missing_from_its_shard_is_named(tmp_path: Path) -> None:
    stnp.save_file({"a": np.zeros(2, BF16)}, str(tmp_path / "s.safetensors"))
    _index(tmp_path, {"a": "s.safetensors", "b": "s.safetensors"})
    with pytest.raises(errors.TensorNotFoundError, match="'b'.*s.safetensors"):
        tst.open(tmp_path)


def test_an_index_over_the_size_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _index(tmp_path, {"a": "s.safetensors", "b": "s.safetensors"})
    monkeypatch.setattr(tst, "MAX_HEADER_BYTES", len(index.read_bytes()) - 1)
    with pytest.raises(errors.FileMalformedError, match="index of more than"):
        tst.open(index)


def test_duplicate_names_in_an_index_are_refused(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}')
    with pytest.raises(errors.FileMalformedError, match="duplicate key 'a'"):
        tst.open(tmp_path)


def test_the_same_name_in_two_shards_is_refused(tmp_path: Path) -> None:
    stnp.save_file({"a": np.zeros(2, BF16)}, str(tmp_path / "1.safetensors"))
    stnp.save_file({"a": np.zeros(2, BF16)}, str(tmp_path / "2.safetensors"))
    with pytest.raises(errors.FileMalformedError, match="'a'"):
        tst.open(tmp_path)


def test_missing_file_is_a_typed_lookup(tmp_path: Path) -> None:
    with pytest.raises(errors.FileMissingError):
        tst.open(tmp_path / "none.safetensors")


def test_a_file_overwritten_with_garbage_after_open_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ok.safetensors"
    stnp.save_file({"a": np.zeros(2, BF16)}, str(path))
    w = tst.open(path)
    path.write_bytes(b"\x00" * 4)  # the file changes between open and load
    with pytest.raises(errors.FileMalformedError, match="ok.safetensors.*'a'"):
        w["a"]


# ---- malformed files (docs/interop.md), crafted byte by byte ---------------------------------------

def _file(header: Any, data: bytes = b"", *, raw: bytes | None = None, length: int | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body) if length is None else length) + body + data


def _one(dtype: Any = "BF16", shape: Any = (2,), offsets: Any = (0, 4)) -> dict[str, Any]:
    return {"t": {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
                  "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}}


MALFORMED: dict[str, tuple[bytes, str]] = {
    "file_shorter_than_8_bytes": (b"\x01\x00\x00", "shorter than the 8-byte"),
    "header_length_0": (_file(None, raw=b""), "header length 0"),
    "header_length_over_100MB": (_file(None, raw=b"{}", length=100_000_001), "exceeds the limit"),
    "header_length_2_64_minus_1": (_file(None, raw=b"{}", length=2**64 - 1), "exceeds the limit"),
    "header_length_past_eof": (_file(None, raw=b"{}", length=1000), "past the end"),
    "header_not_utf8": (_file(None, raw=b'{"\xff": 1}'), "not UTF-8"),
    "header_not_json": (_file(None, raw=b"{not json"), "not JSON"),
    "header_not_an_object": (_file([1, 2]), "not an object"),
    "duplicate_keys": (_file(None, raw=b'{"t":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},'
                                       b'"t":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}', data=b"\0\0"),
                       "duplicate key 't'"),
    "entry_not_an_object": (_file({"t": [1]}), "tensor 't'.*not an object"),
    "dtype_not_a_string": (_file(_one(dtype=5), b"\0" * 4), "tensor 't'.*dtype is a int"),
    "shape_not_a_list": (_file(_one(shape="2"), b"\0" * 4), "tensor 't'.*shape"),
    "shape_negative": (_file(_one(shape=[-2]), b"\0" * 4), "tensor 't'.*shape"),
    "shape_float": (_file(_one(shape=[2.0]), b"\0" * 4), "tensor 't'.*shape"),
    "missing_field": (_file({"t": {"dtype": "BF16", "shape": [2]}}, b"\0" * 4), "tensor 't'.*missing"),
    "unknown_field": (_file({"t": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4], "x": 1}}, b"\0" * 4),
                      "tensor 't'.*unknown"),
    "metadata_not_strings": (_file({"__metadata__": {"a": 1}}), "__metadata__"),
    "unknown_dtype": (_file(_one(dtype="BF17"), b"\0" * 4), "tensor 't'.*unknown dtype 'BF17'"),
    "offsets_one_value": (_file(_one(offsets=[4]), b"\0" * 4), "tensor 't'.*data_offsets"),
    "offsets_three_values": (_file(_one(offsets=[0, 2, 4]), b"\0" * 4), "tensor 't'.*data_offsets"),
    "offsets_not_integers": (_file(_one(offsets=["0", "4"]), b"\0" * 4), "tensor 't'.*data_offsets"),
    "offsets_begin_after_end": (_file(_one(offsets=[4, 0]), b"\0" * 4), "tensor 't'.*begin 4 > end 0"),
    "offsets_beyond_buffer": (_file(_one(offsets=[0, 8]), b"\0" * 4), "tensor 't'.*beyond"),
    "size_not_itemsize_times_shape": (_file(_one(shape=[3]), b"\0" * 4), "tensor 't'.*4 bytes for BF16"),
    "shape_product_overflows": (_file(_one(shape=[2**32, 2**32, 2]), b"\0" * 4), "tensor 't'.*overflows"),
    "overlapping_tensors": (_file({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                                   "b": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 6]}}, b"\0" * 6),
                            "tensor 'b'.*overlap"),
    "hole_between_tensors": (_file({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]},
                                    "b": {"dtype": "BF16", "shape": [1], "data_offsets": [4, 6]}}, b"\0" * 6),
                             "tensor 'b'.*hole of 2 bytes"),
    "trailing_bytes": (_file(_one(), b"\0" * 6), "2 trailing bytes"),
    "empty_name": (_file({"": _one()["t"]}, b"\0" * 4), "empty tensor name"),
    "absurd_name_length": (_file({"n" * 5000: _one()["t"]}, b"\0" * 4), "name of 5000 bytes"),
    "control_characters_in_name": (_file({"a\nb": _one()["t"]}, b"\0" * 4), "control characters"),
    "absurd_entry_count": (_file({f"t{i}": {"dtype": "BF16", "shape": [0], "data_offsets": [0, 0]}
                                  for i in range(tst.MAX_TENSORS + 1)}), "tensors declared"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_is_a_typed_error_naming_the_file(tmp_path: Path, case: str) -> None:
    data, pattern = MALFORMED[case]
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(data)
    with pytest.raises(errors.FileMalformedError, match=pattern) as info:
        tst.open(path)
    assert str(path) in str(info.value)
    assert info.value.code == "file_malformed" and isinstance(info.value, ValueError)


@pytest.mark.parametrize("case", sorted(set(MALFORMED) - {"duplicate_keys", "empty_name", "absurd_name_length",
                                                          "control_characters_in_name", "absurd_entry_count",
                                                          "unknown_field", "metadata_not_strings"}))
def test_the_package_also_refuses_what_tgrad_refuses(tmp_path: Path, case: str) -> None:
    """tgrad's own header check is a superset of the package's: what it refuses, the package
    refuses too (the cases above the package accepts are tgrad's additions)."""
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(MALFORMED[case][0])
    with pytest.raises(Exception):
        with safetensors.safe_open(str(path), framework="numpy") as f:
            for name in f.keys():
                f.get_tensor(name)


def test_a_well_formed_crafted_file_loads(tmp_path: Path) -> None:
    bits = np.array([0x3F80, 0xC000], np.uint16)
    path = tmp_path / "ok.safetensors"
    path.write_bytes(_file(_one(), bits.tobytes()))
    assert tst.open(path)["t"].to_bytes() == bits.tobytes()


# ---- hostile files: every one a typed error naming the file, never a raw exception or a hang ---

def _big_int(digits: int) -> bytes:
    return b"7" * digits


@pytest.mark.parametrize("where", ["shape", "data_offsets"])
def test_integers_of_thousands_of_digits_are_refused(tmp_path: Path, where: str) -> None:
    entry = {"shape": b"[" + _big_int(5000) + b"]", "data_offsets": b"[0, 2]"}
    if where == "data_offsets":
        entry = {"shape": b"[1]", "data_offsets": b"[0, " + _big_int(5000) + b"]"}
    raw = b'{"t": {"dtype": "BF16", "shape": %s, "data_offsets": %s}}' % (entry["shape"], entry["data_offsets"])
    path = tmp_path / "big.safetensors"
    path.write_bytes(_file(None, b"\0\0", raw=raw))
    with pytest.raises(errors.FileMalformedError, match="integer of 5000 digits") as info:
        tst.open(path)
    assert str(path) in str(info.value)


def test_an_index_total_size_of_thousands_of_digits_is_refused(tmp_path: Path) -> None:
    stnp.save_file({"a": np.zeros(2, BF16)}, str(tmp_path / "s.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {"total_size": %s}, "weight_map": {"a": "s.safetensors"}}' % ("9" * 5000))
    with pytest.raises(errors.FileMalformedError, match="integer of 5000 digits") as info:
        tst.open(tmp_path)
    assert str(index) in str(info.value)


UNLOADABLE = sorted(set(tst.DTYPE_BITS) - {"BF16", "F32", "F16", "F64"})


@pytest.mark.parametrize("convert", [False, True])
@pytest.mark.parametrize("dtype", UNLOADABLE)
def test_a_dtype_the_header_allows_but_tgrad_cannot_load_is_unsupported(tmp_path: Path, dtype: str, convert: bool) -> None:
    size = tst.DTYPE_BITS[dtype]  # 8 elements: whole bytes for the 4- and 6-bit types too
    path = tmp_path / "odd.safetensors"
    path.write_bytes(_file(_one(dtype=dtype, shape=(8,), offsets=(0, size)), b"\0" * size))
    w = tst.open(path, convert=convert)
    assert w.schema["t"] == (dtype, (8,))
    with pytest.raises(errors.DtypeUnsupportedError, match=f"'t' is {dtype}") as info:
        w["t"]
    assert str(path) in str(info.value)


def test_a_shard_name_too_long_for_the_file_system_is_refused(tmp_path: Path) -> None:
    _index(tmp_path, {"w": "x" * 5000 + ".safetensors"})
    with pytest.raises(errors.FileMalformedError, match="[Ff]ile name too long") as info:
        tst.open(tmp_path)
    assert str(tmp_path / ("x" * 5000 + ".safetensors")) in str(info.value)


def test_a_path_too_long_for_the_file_system_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ("y" * 5000 + ".safetensors")
    with pytest.raises(errors.FileMalformedError, match="[Ff]ile name too long"):
        tst.open(path)


@pytest.mark.parametrize("which", ["index", "shard", "file"])
def test_a_symlink_loop_is_refused(tmp_path: Path, which: str) -> None:
    stnp.save_file({"a": np.zeros(2, BF16)}, str(tmp_path / "s.safetensors"))
    name = {"index": "model.safetensors.index.json", "shard": "loop.safetensors", "file": "f.safetensors"}[which]
    loop = tmp_path / name
    loop.symlink_to(loop)
    if which == "shard":
        _index(tmp_path, {"a": "s.safetensors", "b": "loop.safetensors"})
    with pytest.raises(errors.FileMalformedError, match="symbolic links") as info:
        tst.open(tmp_path if which == "shard" else loop)
    assert str(loop) in str(info.value)


def test_a_dangling_symlink_shard_is_missing(tmp_path: Path) -> None:
    (tmp_path / "s.safetensors").symlink_to(tmp_path / "gone")
    _index(tmp_path, {"a": "s.safetensors"})
    with pytest.raises(errors.FileMissingError, match="s.safetensors.*'a'"):
        tst.open(tmp_path)


class _FifoWriter:
    """Opens a FIFO for writing in a thread and closes it again at once. A reader that blocked
    opening the FIFO is released by it (and then reads an empty file), so a regression fails its
    test instead of hanging it; on exit the FIFO is opened for reading to release the writer."""

    def __init__(self, fifo: Path) -> None:
        import threading

        self.fifo = fifo
        self.thread = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)

    def __enter__(self) -> _FifoWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            reader = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join()
            os.close(reader)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("which", ["file", "shard", "in_directory"])
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path, which: str) -> None:
    fifo = tmp_path / ("model.safetensors" if which != "shard" else "pipe.safetensors")
    os.mkfifo(fifo)
    if which == "shard":
        _index(tmp_path, {"a": "pipe.safetensors"})
    with _FifoWriter(fifo), pytest.raises(errors.FileMalformedError, match="not a regular file") as info:
        tst.open(fifo if which == "file" else tmp_path)
    assert str(fifo) in str(info.value)


def test_a_directory_named_like_a_shard_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.safetensors").mkdir()
    _index(tmp_path, {"a": "d.safetensors"})
    with pytest.raises(errors.FileMalformedError, match="not a regular file") as info:
        tst.open(tmp_path)
    assert str(tmp_path / "d.safetensors") in str(info.value)


def _rewrite_keeping_inode_and_mtime(path: Path, data: bytes) -> None:
    before = path.stat()
    with path.open("r+b") as f:
        f.write(data)
        f.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_file_rewritten_after_open_is_refused_not_read_with_the_new_header(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    stnp.save_file({"t": np.ones((2, 2), BF16)}, str(path))
    w = tst.open(path)
    stnp.save_file({"t": np.array([1, 2, 3], np.float32)}, str(path))
    with pytest.raises(errors.FileMalformedError, match="changed since it was opened") as info:
        w["t"]
    assert str(path) in str(info.value) and "'t'" in str(info.value)


def test_a_rewrite_of_the_same_size_inode_and_mtime_is_caught_by_the_header(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(_file(_one(shape=[2, 2], offsets=[0, 8]), b"\1" * 8))
    w = tst.open(path)
    _rewrite_keeping_inode_and_mtime(path, _file(_one(shape=[1, 4], offsets=[0, 8]), b"\2" * 8))
    with pytest.raises(errors.FileMalformedError, match="changed since it was opened"):
        w["t"]


@pytest.mark.parametrize("change", ["truncated", "replaced", "removed", "fifo"])
def test_a_file_changed_after_open_is_refused(tmp_path: Path, change: str) -> None:
    path = tmp_path / "w.safetensors"
    stnp.save_file({"t": np.ones((64,), BF16)}, str(path))
    w = tst.open(path)
    if change == "truncated":
        os.truncate(path, path.stat().st_size - 2)
    elif change == "replaced":  # another file renamed over it: same bytes, another inode
        other = tmp_path / "other"
        other.write_bytes(path.read_bytes())
        os.replace(other, path)
    else:
        path.unlink()
        if change == "fifo":
            os.mkfifo(path)
    wanted, says = {"truncated": (errors.FileMalformedError, "changed since it was opened"),
                    "replaced": (errors.FileMalformedError, "changed since it was opened"),
                    "removed": (errors.FileMissingError, "no such file"),
                    "fifo": (errors.FileMalformedError, "not a regular file")}[change]
    with _FifoWriter(path) if change == "fifo" else contextlib.nullcontext(), pytest.raises(wanted, match=says) as info:
        w["t"]
    assert str(path) in str(info.value) and "'t'" in str(info.value)


def test_reading_many_tensors_gives_the_files_bytes(checkpoint: Any) -> None:
    root, weights = checkpoint
    loaded = tst.open(root).load([n for n, a in weights.items() if a.dtype == BF16])
    assert {n: t.to_bytes() for n, t in loaded.items()} == {n: _bits(weights[n]) for n in loaded}


@pytest.mark.parametrize("rank", range(9))
def test_save_and_load_round_trip_every_rank_including_0d(tmp_path: Path, rank: int) -> None:
    shape = tuple(range(2, 2 + rank))
    t = tgrad.Tensor.from_numpy(np.random.default_rng(rank).standard_normal(shape).astype(np.float32))
    path = tmp_path / "r.safetensors"
    tst.save(path, {"t": t})
    w = tst.open(path)
    assert w.schema["t"] == ("BF16", shape)
    back = w["t"]
    assert back.shape == shape and back.to_bytes() == t.to_bytes()
    assert stnp.load_file(str(path))["t"].shape == shape


def test_a_0d_tensor_the_package_wrote_loads_as_0d(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    stnp.save_file({"s": np.array(1.5, BF16)}, str(path))
    got = tst.open(path)["s"]
    assert got.shape == () and got.to_bytes() == _bits(np.array(1.5, BF16))


def test_a_tensor_of_more_dimensions_than_tgrad_holds_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.safetensors"
    stnp.save_file({"t": np.zeros((1,) * 9, BF16)}, str(path))
    w = tst.open(path)
    assert w.schema["t"].shape == (1,) * 9
    with pytest.raises(errors.InvalidArgumentError, match="9 dimensions") as info:
        w["t"]
    assert str(path) in str(info.value) and "'t'" in str(info.value)


def test_a_hugging_face_cache_snapshot_of_symlinks_into_blobs_loads(tmp_path: Path) -> None:
    """The Hub's cache keeps each file once in blobs/ (named by its hash) and links it from
    snapshots/<revision>/ under its name: shards and index are symlinks (../../blobs/<sha>)."""
    weights = _weights()
    names = list(weights)
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "0123abcd"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        stnp.save_file({n: weights[n] for n in part}, str(blobs / f"sha{i}"))
        (snapshot / shard).symlink_to(Path("..", "..", "blobs", f"sha{i}"))
        weight_map.update({n: shard for n in part})
    (blobs / "shaindex").write_text(json.dumps({"metadata": {"total_size": 1234}, "weight_map": weight_map}))
    (snapshot / "model.safetensors.index.json").symlink_to(Path("..", "..", "blobs", "shaindex"))
    for path in (snapshot, snapshot / "model.safetensors.index.json"):
        w = tst.open(path)
        assert set(w.keys()) == set(weights)
        for name, array in weights.items():
            if array.dtype == BF16:
                assert w[name].to_bytes() == _bits(array), name
    single = tst.open(snapshot / "model-00001-of-00002.safetensors")
    assert set(single.keys()) == set(names[: len(names) // 2])
