"""Hostile safetensors files and indexes through tgrad.safetensors.open (hypothesis): valid files
mutated (fields of the wrong type, integers of thousands of digits, odd dtypes, overlapping or
out-of-range offsets, wrong header lengths, cut or padded files; shard maps with odd names:
absolute, climbing, too long, a directory, a loop of links, a dangling link). Whatever the bytes,
the result is a tgrad error naming a file, or a checkpoint whose tensors read back exactly the
bytes of the file; never another exception.

A few dozen examples each by default; TGRAD_FUZZ_EXAMPLES=N runs N (`nox -s fuzz` sets it).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("safetensors")

from tgrad import errors  # noqa: E402
from tgrad import safetensors as tst  # noqa: E402

EXAMPLES = int(os.environ.get("TGRAD_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Stands for an integer of thousands of digits in the JSON text (json.dumps cannot write one).
HUGE = "@@huge-integer@@"
HUGE_DIGITS = "9" * 5000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**65) | st.floats(allow_nan=False) | st.text(max_size=6)
    | st.just(HUGE),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
dtypes = st.sampled_from(sorted(tst.DTYPE_BITS)) | st.sampled_from(["BF16", "BF16", "F32", "bf16", "BF17", ""])
#: Tensor names: mostly valid ones (so that a file gets past its names), sometimes any text.
VALID_NAMES = ["a", "b.weight", "model.layers.0.q", "x", "lm_head.weight"]
names = st.sampled_from(VALID_NAMES) | st.sampled_from(VALID_NAMES) | st.text(max_size=8)


def _encode(header: Any) -> bytes:
    return json.dumps(header).replace(json.dumps(HUGE), HUGE_DIGITS).encode()


@st.composite
def tensor_files(draw: Any) -> tuple[dict[str, Any], bytes]:
    """A valid header of a few tensors (shapes whose bytes fit) and its data buffer."""
    header: dict[str, Any] = {}
    at = 0
    for name in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
        dtype = draw(st.sampled_from(["BF16", "BF16", "BF16", "F32", "F16", "I8", "F8_E4M3"]))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        count = 1
        for d in shape:
            count *= d
        size = count * tst.DTYPE_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        at += size
    return header, draw(st.binary(min_size=at, max_size=at))


@st.composite
def mutated_files(draw: Any) -> bytes:
    """A valid file, then a few mutations of its header, its length field or its size."""
    header, data = draw(tensor_files())
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(sorted(header)))
        entry = header[name]
        kind = draw(st.sampled_from(["field", "dtype", "offsets", "shape", "drop", "extra", "rename",
                                     "metadata", "entry"]))
        if kind == "field" and isinstance(entry, dict):
            entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(json_values)
        elif kind == "dtype" and isinstance(entry, dict):
            entry["dtype"] = draw(dtypes)
        elif kind == "offsets" and isinstance(entry, dict):
            entry["data_offsets"] = [draw(st.integers(-1, len(data) + 3) | st.just(HUGE)) for _ in range(2)]
        elif kind == "shape" and isinstance(entry, dict):
            entry["shape"] = draw(st.lists(st.integers(-1, 2**33) | st.just(HUGE), max_size=4))
        elif kind == "drop" and isinstance(entry, dict) and entry:
            del entry[draw(st.sampled_from(sorted(entry)))]
        elif kind == "extra" and isinstance(entry, dict):
            entry[draw(st.text(max_size=4))] = draw(json_values)
        elif kind == "rename":
            header[draw(names)] = header.pop(name)
        elif kind == "metadata":
            header["__metadata__"] = draw(json_values)
        else:
            header[name] = draw(json_values)
    body = _encode(header)
    length = draw(st.sampled_from([len(body)] * 4 + [0, len(body) - 1, len(body) + 1, 2**64 - 1, 10**8 + 1]))
    blob = struct.pack("<Q", max(0, length)) + body + data
    cut = draw(st.sampled_from([None] * 4 + ["cut", "pad"]))
    if cut == "cut":
        blob = blob[: draw(st.integers(0, len(blob)))]
    elif cut == "pad":
        blob += draw(st.binary(min_size=1, max_size=4))
    return blob


#: Shard names an index may give, beside the real shards s1 and s2 (see _shards).
ODD_SHARDS = ["s1.safetensors", "s2.safetensors", "sub/s3.safetensors", "", "/etc/passwd",
              "../s1.safetensors", "sub/../../x", "C:\\x", "x" * 300, "y" * 5000, "dir.safetensors",
              "loop.safetensors", "dangling.safetensors", "missing.safetensors", "sub", "."]


def _shards(root: Path, tensors: dict[str, list[str]]) -> None:
    """Real shards (each holding the tensors listed for it) and the odd entries an index may name:
    a directory, a loop of symbolic links, a dangling link."""
    (root / "sub").mkdir()
    for shard, held in tensors.items():
        header: dict[str, Any] = {}
        for i, name in enumerate(held):
            header[name] = {"dtype": "BF16", "shape": [2], "data_offsets": [4 * i, 4 * i + 4]}
        body = _encode(header)
        data = bytes(range(4 * len(held)))
        (root / shard).write_bytes(struct.pack("<Q", len(body)) + body + data)
    (root / "dir.safetensors").mkdir()
    (root / "loop.safetensors").symlink_to("loop.safetensors")
    (root / "dangling.safetensors").symlink_to("nowhere")


@st.composite
def indexes(draw: Any) -> tuple[dict[str, list[str]], bytes]:
    """(tensors held by each real shard, the index file's bytes)."""
    held = {shard: draw(st.lists(names, max_size=3, unique=True))
            for shard in ("s1.safetensors", "s2.safetensors", "sub/s3.safetensors")}
    weight_map: dict[str, Any] = {}
    for shard, tensors in held.items():
        for name in tensors:
            weight_map[name] = shard
    for _ in range(draw(st.integers(0, 3))):  # odd entries: another shard, odd names, odd values
        weight_map[draw(names)] = draw(st.sampled_from(ODD_SHARDS) | st.sampled_from(ODD_SHARDS)
                                       | st.text(max_size=6) | json_values)
    document: Any = {"metadata": {"total_size": draw(st.integers(0, 99) | st.just(HUGE) | json_values)},
                     "weight_map": weight_map}
    spoil = draw(st.sampled_from([None] * 6 + ["no_map", "map_not_object", "not_object"]))
    if spoil == "no_map":
        del document["weight_map"]
    elif spoil == "map_not_object":
        document["weight_map"] = draw(json_values.filter(lambda v: not isinstance(v, dict)))
    elif spoil == "not_object":
        document = [document]
    return held, _encode(document)


def _file_bytes(file: Path, name: str) -> bytes:
    """The bytes a header says hold `name` (an independent reading of a file tgrad accepted)."""
    blob = file.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    begin, end = json.loads(blob[8:8 + n])[name]["data_offsets"]
    return blob[8 + n + begin:8 + n + end]


def _names_a_file(exc: errors.TgradError, root: Path, shards: list[Any]) -> None:
    files = [root, *root.rglob("*"), *(root / s for s in shards if isinstance(s, str) and s)]
    assert any(str(f) in str(exc) for f in files), f"names no file: {exc!r}"


def _outcome(path: Path, root: Path, holder: Any, shards: list[Any]) -> None:
    """Open `path`: a tgrad error naming a file, or every tensor reads back its file's bytes (or
    is refused reading, naming its file: a dtype tgrad does not load without convert)."""
    try:
        w = tst.open(path)
    except errors.TgradError as exc:
        _names_a_file(exc, root, shards)
        return
    for name in w.keys():
        try:
            tensor = w[name]
        except errors.TgradError as exc:
            _names_a_file(exc, root, shards)
            continue
        assert w.schema[name].dtype == "BF16"
        assert tensor.to_bytes() == _file_bytes(holder(name), name), name
        tensor.release()


@FUZZ
@given(blob=mutated_files())
def test_a_mutated_file_is_a_typed_error_or_reads_back_its_bytes(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "model.safetensors"
        path.write_bytes(blob)
        _outcome(path, root, lambda name: path, [])


@FUZZ
@given(case=indexes(), through_directory=st.booleans())
def test_a_mutated_index_is_a_typed_error_or_reads_back_its_bytes(case: Any, through_directory: bool) -> None:
    held, document = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _shards(root, held)
        index = root / "model.safetensors.index.json"
        index.write_bytes(document)
        try:
            weight_map = json.loads(document)["weight_map"]
        except (ValueError, TypeError, KeyError):  # the spoilt documents: tgrad must refuse them
            weight_map = {}
        shards = list(weight_map.values()) if isinstance(weight_map, dict) else []
        _outcome(root if through_directory else index, root, lambda name: root / weight_map[name], shards)
