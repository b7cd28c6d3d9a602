"""safetensors checkpoints in and out, with a typed schema.

    w = tgrad.safetensors.open("ckpt/")          # a file, a sharded directory or an index .json
    w.schema["model.embed.weight"]               # TensorInfo(dtype='BF16', shape=(8, 4))
    w.model.layers[0].self_attn.q_proj.weight    # that tensor, loaded on access
    layer = w.model.layers[0].load()             # the subtree, its tensors read now (one pass per file)
    layer.self_attn.q_proj.weight                # ... and walked in memory
    layer.tensors()                              # {full name: Tensor} of the subtree
    tgrad.safetensors.save("out.safetensors", {"w": tensor})

tgrad reads checkpoints itself: it checks each header (the bytes are read once, the JSON with a
duplicate-key detector and a bound on integer digits) so that every fault names the file and the
tensor, and adds what the safetensors package lacks: duplicate tensor names, shard paths that are
absolute or climb out with `..`, shards missing from disk and tensors an index names but its shard
lacks. Only regular files are opened (a FIFO would block). A tensor is read from its file when
asked for, with plain reads (no memory map, which a file cut short under it turns into SIGBUS),
and only if the file is still the one whose header open() read: same inode, size, modification
time and header bytes. Every failure is a tgrad typed error (docs/interop.md):
FileMalformedError, FileMissingError, TensorNotFoundError, DtypeConversionRefusedError,
DtypeUnsupportedError. `save` writes with the `safetensors` package.

bf16 tensors come in bit for bit; F32, F16 and F64 round to bf16 (RNE) only with convert=True;
the header check accepts every safetensors dtype, but reading any other raises
DtypeUnsupportedError. `python -m tgrad safetensors-stub PATH > model.pyi` writes a tree of
Protocol classes for a checkpoint's names and shapes (tgrad.safetensors_stub), so a type checker
knows `w.model.layers[0].mlp.up_proj.weight` is a Tensor[Literal[11008], Literal[4096]] and
`w.model.layers[0].load()` is that layer's class again. A Checkpoint is
a context manager: leaving the block closes it to further reads.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np

from . import _buildable, errors
from ._ffi import lib
from .tensor import Tensor

__all__ = ["Checkpoint", "LOADABLE", "Node", "TensorInfo", "TensorNotFoundAttributeError", "open", "read_header",
           "save", "stub"]

#: Largest header accepted, as in the safetensors package (100 MB).
MAX_HEADER_BYTES = 100_000_000
#: Most tensors one file or checkpoint may declare.
MAX_TENSORS = 100_000
#: Longest tensor name, in UTF-8 bytes.
MAX_NAME_BYTES = 1024
#: Bits per element of each safetensors dtype.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
#: dtypes convert=True rounds to bf16.
CONVERTIBLE = ("F32", "F16", "F64")
#: dtypes tgrad loads: BF16 bit for bit, CONVERTIBLE with convert=True. The header check accepts
#: every DTYPE_BITS name; reading a tensor of any other raises DtypeUnsupportedError.
LOADABLE = ("BF16", *CONVERTIBLE)
#: Most digits an integer of a header or an index may have: sizes and offsets are below 2^64,
#: which has 20 (Python refuses to parse past 4300 with a raw ValueError).
MAX_INT_DIGITS = 20
INDEX_SUFFIX = ".safetensors.index.json"
#: How the bytes of each loadable dtype are laid out (safetensors stores little-endian).
_LAYOUT = {"BF16": "<u2", "F32": "<f4", "F16": "<f2", "F64": "<f8"}
_MAX_DIMS = int(lib.TGRAD_MAX_DIMS)


class TensorInfo(NamedTuple):
    """What a header says of one tensor: its safetensors dtype name and shape."""

    dtype: str
    shape: tuple[int, ...]


#: No tensor or prefix of that name, met as an attribute (``w.model.nope``): a TensorNotFoundError
#: that is also an AttributeError, so that getattr(node, name, default) and hasattr work. Made like
#: the registry's classes (tgrad.errors), whose bases static checkers cannot see.
TensorNotFoundAttributeError: type[errors.TgradError] = type(
    "TensorNotFoundAttributeError", (errors.by_code["tensor_not_found"], AttributeError),
    {"__module__": __name__, "__doc__": "no tensor or prefix of that name (an AttributeError too)"})


class _Stamp(NamedTuple):
    """A file as open() read its header. A read refuses the file once any of it differs: the
    schema was read from this file, and bytes of another one would not match it."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    head: bytes  # the 8-byte length and the JSON header


class _Header(NamedTuple):
    infos: dict[str, TensorInfo]
    meta: dict[str, str]
    spans: dict[str, tuple[int, int]]  # data_offsets, from the start of the data buffer
    stamp: _Stamp


class _Entry(NamedTuple):
    info: TensorInfo
    file: Path
    span: tuple[int, int]
    stamp: _Stamp


def _where(path: Path | str, tensor: str | None) -> str:
    return f"{path}" + (f": tensor {tensor!r}" if tensor is not None else "")


def _malformed(path: Path | str, what: str, tensor: str | None = None) -> errors.TgradError:
    return errors.by_code["file_malformed"](f"{_where(path, tensor)}: {what}")


def _no_duplicates(pairs: list[tuple[str, Any]], path: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _malformed(path, f"duplicate key {key!r} in the JSON header")
        seen[key] = value
    return seen


def _json(text: str, path: Path) -> Any:
    """Parse a header or index: duplicate keys and integers of more than MAX_INT_DIGITS digits are
    refused naming the file (the errors raised inside the parser reach the caller as they are)."""

    def parse_int(digits: str) -> int:
        count = len(digits.lstrip("-"))
        if count > MAX_INT_DIGITS:
            raise _malformed(path, f"integer of {count} digits (sizes and offsets have at most {MAX_INT_DIGITS})")
        return int(digits)

    return json.loads(text, object_pairs_hook=lambda pairs: _no_duplicates(pairs, path), parse_int=parse_int)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(name: str, path: Path) -> None:
    size = len(name.encode("utf-8", "surrogatepass"))
    if size == 0:
        raise _malformed(path, "empty tensor name")
    if size > MAX_NAME_BYTES:
        raise _malformed(path, f"tensor name of {size} bytes (limit {MAX_NAME_BYTES})", name[:64] + "...")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise _malformed(path, "tensor name holds control characters or lone surrogates", name)


# ---- opening files: regular files only, every OS error typed ------------------------------------

def _os_error(path: Path, exc: OSError, tensor: str | None = None) -> errors.TgradError:
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return errors.by_code["file_missing"](f"{_where(path, tensor)}: no such file")
    return _malformed(path, f"cannot be read: {exc.strerror or exc}", tensor)  # a loop of links, a name too long


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(path: Path, mode: int, tensor: str | None) -> errors.TgradError:
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return _malformed(path, f"is not a regular file ({kind})", tensor)


def _open_regular(path: Path, tensor: str | None = None) -> tuple[io.BufferedReader, os.stat_result]:
    """`path` open for reading, with its status; refused unless it is a regular file. Checked
    before opening (opening a FIFO blocks until a writer comes) and again on the open file, which
    may have been swapped in between (O_NONBLOCK keeps that open from blocking)."""
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise _not_regular(path, before.st_mode, tensor)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
    except OSError as exc:
        raise _os_error(path, exc, tensor) from None
    file = os.fdopen(fd, "rb")
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        file.close()
        raise _not_regular(path, status.st_mode, tensor)
    return file, status


def _read(file: io.BufferedReader, path: Path, size: int) -> bytes:
    try:
        return file.read(size)
    except OSError as exc:
        raise _os_error(path, exc) from None


# ---- headers and indexes ---------------------------------------------------------------------------

def read_header(path: str | os.PathLike[str]) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Validate one .safetensors file's header against the safetensors format and tgrad's stricter rules (docs/interop.md) and return (name ->
    TensorInfo in file order, metadata). Reads the 8-byte length and the header only."""
    header = _read_header(Path(path))
    return header.infos, header.meta


def _read_header(p: Path) -> _Header:
    file, status = _open_regular(p)
    with file:
        size = status.st_size
        head = _read(file, p, 8)
        if len(head) < 8:
            raise _malformed(p, f"file of {len(head)} bytes is shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n == 0:
            raise _malformed(p, "header length 0")
        if n > MAX_HEADER_BYTES:
            raise _malformed(p, f"header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes")
        if 8 + n > size:
            raise _malformed(p, f"header length {n} reaches past the end of the {size}-byte file")
        raw = _read(file, p, n)
    if len(raw) < n:
        raise _malformed(p, "changed while its header was read (it is shorter now)")
    stamp = _Stamp(status.st_dev, status.st_ino, size, status.st_mtime_ns, head + raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(p, f"header is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        header = _json(text, p)
    except json.JSONDecodeError as exc:
        raise _malformed(p, f"header is not JSON ({exc.msg} at character {exc.pos})") from None
    except RecursionError:
        raise _malformed(p, "header JSON nests too deeply") from None
    if not isinstance(header, dict):
        raise _malformed(p, f"header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _malformed(p, "__metadata__ is not an object of strings")
    if len(header) > MAX_TENSORS:
        raise _malformed(p, f"{len(header)} tensors declared (limit {MAX_TENSORS})")
    buffer = size - 8 - n
    infos: dict[str, TensorInfo] = {}
    spans: dict[str, tuple[int, int]] = {}
    for name, entry in header.items():
        infos[name], spans[name] = _check_entry(name, entry, buffer, p)
    at = 0
    for (begin, end), name in sorted((span, name) for name, span in spans.items()):
        if begin < at:
            raise _malformed(p, f"bytes [{begin}, {end}) overlap the previous tensor", name)
        if begin > at:
            raise _malformed(p, f"hole of {begin - at} bytes before this tensor", name)
        at = end
    if at != buffer:
        raise _malformed(p, f"{buffer - at} trailing bytes after the last tensor")
    return _Header(infos, {str(k): str(v) for k, v in meta.items()}, spans, stamp)


def _check_entry(name: str, entry: Any, buffer: int, p: Path) -> tuple[TensorInfo, tuple[int, int]]:
    """One tensor's header entry, checked against a data buffer of `buffer` bytes."""
    _check_name(name, p)
    if not isinstance(entry, dict):
        raise _malformed(p, f"entry is a JSON {type(entry).__name__}, not an object", name)
    extra = set(entry) - {"dtype", "shape", "data_offsets"}
    missing = {"dtype", "shape", "data_offsets"} - set(entry)
    if missing or extra:
        raise _malformed(p, f"fields missing {sorted(missing)} / unknown {sorted(extra)}", name)
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise _malformed(p, f"dtype is a {type(dtype).__name__}, not a string", name)
    if dtype not in DTYPE_BITS:
        raise _malformed(p, f"unknown dtype {dtype!r}", name)
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _malformed(p, f"shape {shape!r} is not a list of non-negative integers", name)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) and o >= 0 for o in offsets):
        raise _malformed(p, f"data_offsets {offsets!r} is not 2 non-negative integers", name)
    begin, end = offsets
    if begin > end:
        raise _malformed(p, f"data_offsets begin {begin} > end {end}", name)
    if end > buffer:
        raise _malformed(p, f"data_offsets end {end} is beyond the {buffer}-byte data buffer", name)
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPE_BITS[dtype]
    if bits >= 1 << 67:  # more than 2^64 bytes: the package's checked product overflows
        raise _malformed(p, f"shape {shape} overflows 64 bits in its byte size", name)
    if bits % 8 or bits // 8 != end - begin:
        raise _malformed(p, f"{end - begin} bytes for {dtype} {shape} (needs {bits / 8:g})", name)
    return TensorInfo(dtype, tuple(shape)), (begin, end)


def _shard_path(root: Path, shard: Any, index: Path, name: str) -> Path:
    if not isinstance(shard, str) or not shard:
        raise _malformed(index, f"shard {shard!r} is not a file name", name)
    try:
        encoded = os.fsencode(shard)
    except UnicodeError:  # a lone surrogate from a JSON escape: no file system can name it
        raise _malformed(index, f"shard {shard!r} is not a name the file system can hold", name) from None
    if b"\0" in encoded:
        raise _malformed(index, f"shard {shard!r} holds a NUL byte", name)
    pure = Path(shard)
    if pure.is_absolute() or shard.startswith(("/", "\\")) or (len(shard) > 1 and shard[1] == ":"):
        raise _malformed(index, f"shard path {shard!r} is absolute", name)
    if ".." in shard.replace("\\", "/").split("/"):
        raise _malformed(index, f"shard path {shard!r} climbs out with '..'", name)
    return root / pure


def _read_index(index: Path) -> dict[str, Path]:
    file, status = _open_regular(index)
    with file:  # a read of the limit would allocate all of it up front: read what the file holds
        raw = _read(file, index, min(status.st_size, MAX_HEADER_BYTES) + 1)
    if len(raw) > MAX_HEADER_BYTES:
        raise _malformed(index, f"index of more than {MAX_HEADER_BYTES} bytes")
    try:
        doc = _json(raw.decode("utf-8"), index)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _malformed(index, f"index is not UTF-8 JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise _malformed(index, "index has no 'weight_map' object")
    weight_map: dict[str, Any] = doc["weight_map"]
    if len(weight_map) > MAX_TENSORS:
        raise _malformed(index, f"{len(weight_map)} tensors named (limit {MAX_TENSORS})")
    out: dict[str, Path] = {}
    for name, shard in weight_map.items():
        _check_name(name, index)
        out[name] = _shard_path(index.parent, shard, index, name)
    return out


def _entries(path: Path) -> dict[str, _Entry]:
    """Every tensor of a file, an index or a directory, validated, with the file holding it."""
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:
        raise _os_error(path, exc) from None
    if is_dir:
        indexes = sorted(path.glob("*" + INDEX_SUFFIX))
        if len(indexes) > 1:
            raise _malformed(path, f"{len(indexes)} index files: {[i.name for i in indexes]}")
        if indexes:
            return _entries(indexes[0])
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise errors.by_code["file_missing"](f"{path}: no .safetensors file in the directory")
        out: dict[str, _Entry] = {}
        for file in files:
            for name, entry in _file_entries(file, _read_header(file)).items():
                if name in out:
                    raise _malformed(file, f"also in {out[name].file.name}", name)
                out[name] = entry
        return out
    if path.name.endswith(".json"):
        return _index_entries(path)
    return _file_entries(path, _read_header(path))


def _file_entries(file: Path, header: _Header) -> dict[str, _Entry]:
    return {name: _Entry(info, file, header.spans[name], header.stamp) for name, info in header.infos.items()}


def _index_entries(index: Path) -> dict[str, _Entry]:
    wanted = _read_index(index)
    shards: dict[Path, dict[str, _Entry]] = {}
    out: dict[str, _Entry] = {}
    for name, shard in wanted.items():
        if shard not in shards:
            try:
                shards[shard] = _file_entries(shard, _read_header(shard))
            except errors.FileMissingError:
                raise errors.by_code["file_missing"](
                    f"{index}: shard {str(shard)!r} (holding tensor {name!r}) is missing from disk") from None
        found = shards[shard].get(name)
        if found is None:
            raise errors.by_code["tensor_not_found"](
                f"{index}: tensor {name!r} is named in the index but missing from shard {shard.name!r}")
        out[name] = found
    return out


# ---- reading tensors ----------------------------------------------------------------------------

def _package() -> Any:
    try:
        import safetensors
    except ImportError:  # pragma: no cover - the extra is not installed
        raise errors.by_code["backend_unavailable"](
            "tgrad.safetensors.save needs the safetensors package: pip install 'tgrad[safetensors]'") from None
    return safetensors


def _check_loadable(entry: _Entry, name: str, convert: bool) -> None:
    """Refuse, before reading anything, a tensor tgrad cannot hold."""
    dtype, shape = entry.info
    if dtype not in LOADABLE:
        raise errors.by_code["dtype_unsupported"](
            f"{entry.file}: tensor {name!r} is {dtype}; tgrad reads BF16 (and F32, F16, F64 with convert=True)")
    if dtype != "BF16" and not convert:
        raise errors.by_code["dtype_conversion_refused"](
            f"{entry.file}: tensor {name!r} is {dtype}, not BF16; pass convert=True to round it to bf16")
    if len(shape) > _MAX_DIMS:
        raise errors.by_code["invalid_argument"](
            f"{entry.file}: tensor {name!r} has {len(shape)} dimensions; a tgrad tensor has at most {_MAX_DIMS}")
    # The header's shape must also be one numpy can build (the read goes through a numpy array):
    # [2**62, 0] holds no byte and passes the header checks, but numpy refuses it as too big.
    why = _buildable.problem(shape, int(_LAYOUT[dtype][2:]))
    if why is not None:
        raise errors.by_code["size_overflow"](f"{entry.file}: tensor {name!r} cannot be read: {why}")


def _unchanged(status: os.stat_result, stamp: _Stamp) -> bool:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns) == stamp[:4]


def _read_tensors(file: Path, group: list[tuple[str, _Entry]]) -> dict[str, Tensor]:
    """The tensors of `group`, all held by `file`, read through one open of it. That must still be
    the file open() read the header of (device, inode, size, modification time and header bytes
    before the reads; size and time again after them), else nothing is returned."""
    stamp = group[0][1].stamp
    changed = "changed since it was opened (its size, time, inode or header differ); open it again"
    made: dict[str, Tensor] = {}
    handle, status = _open_regular(file, group[0][0])
    try:
        with handle:
            if not _unchanged(status, stamp) or _read(handle, file, len(stamp.head)) != stamp.head:
                raise _malformed(file, changed, group[0][0])
            for name, entry in group:
                made[name] = _read_tensor(handle, entry, name, changed)
            if not _unchanged(os.fstat(handle.fileno()), stamp):
                raise _malformed(file, changed, group[-1][0])
    except BaseException:
        for tensor in made.values():
            tensor.release()
        raise
    return made


def _read_tensor(handle: io.BufferedReader, entry: _Entry, name: str, changed: str) -> Tensor:
    begin, end = entry.span
    try:  # the shape passed _check_loadable: numpy can build it, given the memory
        array = np.empty(entry.info.shape, dtype=_LAYOUT[entry.info.dtype])
    except MemoryError:
        raise errors.by_code["out_of_memory"](
            f"{entry.file}: tensor {name!r}: cannot allocate {end - begin} bytes to read it") from None
    view = array.reshape(-1).view(np.uint8).data
    handle.seek(len(entry.stamp.head) + begin)
    got = 0
    try:
        while got < end - begin:  # one read() returns at most about 2 GiB on Linux
            count = handle.readinto(view[got:])
            if not count:
                raise _malformed(entry.file, changed, name)  # it ends early: it was cut short
            got += count
    except OSError as exc:
        raise _os_error(entry.file, exc, name) from None
    try:
        if entry.info.dtype == "BF16":
            return Tensor.from_bf16_bits(array)
        return Tensor.from_numpy(array)  # F16 too: widened exactly, then one rounding to bf16
    except errors.TgradError as exc:  # out of memory, say: name the tensor and its file
        raise type(exc)(f"{entry.file}: tensor {name!r}: {exc.detail or exc}") from None


class Checkpoint:
    """A validated checkpoint (one file, a sharded directory or an index): its schema, and the
    tensors, each read from its file when asked for (refused if the file changed since open)."""

    def __init__(self, path: str | os.PathLike[str], *, convert: bool = False) -> None:
        self.path = Path(path)
        self.convert = convert
        self._entries = _entries(self.path)
        #: name -> TensorInfo(dtype, shape), in file (or index) order.
        self.schema: dict[str, TensorInfo] = {n: e.info for n, e in self._entries.items()}
        self._root = Node(self, "")
        self._closed = False

    def __repr__(self) -> str:
        closed = " (closed)" if self._closed else ""
        return f"<tgrad.safetensors.Checkpoint {str(self.path)!r}: {len(self.schema)} tensors{closed}>"

    def close(self) -> None:
        """Read no more tensors (a later read raises InvalidHandleError); the schema stays. Tensors
        already read are the caller's and stay valid. No file is held open between reads."""
        self._closed = True

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        return list(self._entries)

    def __getitem__(self, name: str) -> Tensor:
        """The tensor of that full name (loaded now)."""
        return self.load([name])[name]

    def load(self, names: Sequence[str] | None = None) -> dict[str, Tensor]:
        """{name: Tensor} of the given names (default: all), in that order; each file is opened
        and checked once."""
        if self._closed:
            raise errors.by_code["invalid_handle"](f"{self.path}: the checkpoint is closed")
        wanted: dict[str, _Entry] = {}
        for name in self.keys() if names is None else names:
            entry = self._entries.get(name)
            if entry is None:
                raise errors.by_code["tensor_not_found"](f"{self.path}: no tensor named {name!r}")
            _check_loadable(entry, name, self.convert)
            wanted[name] = entry
        by_file: dict[Path, list[tuple[str, _Entry]]] = {}
        for name, entry in wanted.items():
            by_file.setdefault(entry.file, []).append((name, entry))
        made: dict[str, Tensor] = {}
        try:
            for file, group in by_file.items():
                made.update(_read_tensors(file, group))
        except BaseException:
            for tensor in made.values():
                tensor.release()
            raise
        return {name: made[name] for name in wanted}

    @property
    def root(self) -> Node:
        """The tree of names: root.model.layers[0] ..."""
        return self._root

    def __getattr__(self, part: str) -> Any:
        if part.startswith("_"):
            raise AttributeError(part)
        return getattr(self._root, part)


class _Resident:
    """The tensors of a loaded subtree, held in memory: what a Node walks once load() read them
    (the checkpoint may be closed, or its files changed, since)."""

    __slots__ = ("path", "_tensors")

    def __init__(self, path: Path, tensors: dict[str, Tensor]) -> None:
        self.path = path
        self._tensors = tensors

    def keys(self) -> list[str]:
        return list(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __getitem__(self, name: str) -> Tensor:
        return self._tensors[name]

    def load(self, names: Sequence[str]) -> dict[str, Tensor]:
        return {n: self._tensors[n] for n in names}


class Node:
    """A prefix of tensor names: attributes and indices walk the name's dot-separated parts
    (numbers become indices, and a slice of them gives a list); a full name gives its Tensor, a
    prefix another Node. `load()` reads the subtree's tensors at once and gives the same tree over
    them in memory (python -m tgrad safetensors-stub types both alike, docs/typing.md)."""

    __slots__ = ("_ckpt", "_prefix")

    def __init__(self, ckpt: Checkpoint | _Resident, prefix: str) -> None:
        self._ckpt = ckpt
        self._prefix = prefix

    def _full(self, part: str) -> str:
        return f"{self._prefix}.{part}" if self._prefix else part

    def names(self) -> list[str]:
        """Full names of every tensor under this node."""
        if not self._prefix:
            return self._ckpt.keys()
        lead = self._prefix + "."
        return [n for n in self._ckpt.keys() if n.startswith(lead) or n == self._prefix]

    def children(self) -> list[str]:
        """The next name parts under this node, in first-seen order."""
        cut = len(self._prefix) + 1 if self._prefix else 0
        seen: dict[str, None] = {}
        for n in self.names():
            if n != self._prefix:
                seen.setdefault(n[cut:].split(".", 1)[0], None)
        return list(seen)

    def _child(self, part: str, missing: type[errors.TgradError] = errors.by_code["tensor_not_found"]) -> Tensor | Node:
        full = self._full(part)
        lead = full + "."
        if any(n.startswith(lead) for n in self._ckpt.keys()):
            return Node(self._ckpt, full)
        if full in self._ckpt:
            return self._ckpt[full]
        raise missing(f"{self._ckpt.path}: no tensor or prefix {full!r}")

    def __getattr__(self, part: str) -> Any:
        if part.startswith("__"):
            raise AttributeError(part)
        return self._child(part, TensorNotFoundAttributeError)

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, slice):
            return [self[i] for i in range(len(self))[key]]
        if isinstance(key, int) and not isinstance(key, bool):
            indices = self._indices()
            if key < 0:
                key += len(indices)
            if not 0 <= key < len(indices):
                raise errors.by_code["index_out_of_range"](
                    f"{self._prefix or '<root>'}[{key}]: {len(indices)} entries")
            return self._child(str(indices[key]))
        return self._child(str(key))

    def _indices(self) -> list[int]:
        return sorted(int(c) for c in self.children() if c.isdigit())

    def __len__(self) -> int:
        return len(self._indices())

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __dir__(self) -> list[str]:
        return [c for c in self.children() if c.isidentifier()]

    def load(self) -> Node:
        """This subtree with every tensor under it read now (each file opened and checked once, as
        Checkpoint.load), walked in memory from then on: attributes and indices give those same
        Tensor objects, whether or not the checkpoint is still open. A loaded node returns itself."""
        if isinstance(self._ckpt, _Resident):
            return self
        return Node(_Resident(self._ckpt.path, self._ckpt.load(self.names())), self._prefix)

    def tensors(self) -> dict[str, Tensor]:
        """{full name: Tensor} of every tensor under this node (read now unless loaded)."""
        return self._ckpt.load(self.names())

    def __repr__(self) -> str:
        loaded = ", loaded" if isinstance(self._ckpt, _Resident) else ""
        return f"<tgrad.safetensors.Node {self._prefix or '<root>'!r}: {len(self.names())} tensors{loaded}>"


def open(path: str | os.PathLike[str], *, convert: bool = False) -> Checkpoint:  # noqa: A001
    """Open a .safetensors file, a directory of shards (with or without an index) or a
    `*.safetensors.index.json`; validate every header; load nothing yet."""
    return Checkpoint(path, convert=convert)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Tensor],
         metadata: Mapping[str, str] | None = None) -> None:
    """Write tgrad tensors (bf16, logical view, row-major) to a .safetensors file with the
    safetensors package."""
    st = _package()
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise errors.by_code["invalid_argument"](f"save: tensor name {name!r} is not a str")
        if not isinstance(t, Tensor):
            raise errors.by_code["invalid_argument"](f"save: {name!r} is a {type(t).__name__}, not a tgrad.Tensor")
        arrays[name] = t.numpy()  # ml_dtypes.bfloat16, row-major (ascontiguousarray would make a 0-d array 1-d)
    from safetensors.numpy import save_file

    try:
        save_file(arrays, str(path), dict(metadata) if metadata else None)
    except (st.SafetensorError, ValueError, TypeError) as exc:
        raise errors.by_code["invalid_argument"](f"{path}: safetensors: {exc}") from None


# ---- stubs (tgrad.safetensors_stub) -----------------------------------------------------------

def stub(path: str | os.PathLike[str]) -> str:
    """Python stub text (.pyi) for a checkpoint: Protocol classes naming its tensors, typed with
    their shapes, and a Checkpoint class with the API of this module's (docs/typing.md)."""
    from .safetensors_stub import stub_text

    return stub_text(open(path).schema, Path(path).name)


def _stub_command(args: Any) -> int:
    import sys

    try:
        sys.stdout.write(stub(args.path))
    except errors.TgradError as exc:
        print(f"tgrad safetensors-stub: {exc.code}: {exc}", file=sys.stderr)
        return 1
    return 0


def add_arguments(parser: Any) -> None:
    parser.add_argument("path", help="a Hugging Face model directory (config.json and model.safetensors, or "
                        "shards with their index), a .safetensors file, a directory of shards or an index .json")
    parser.set_defaults(func=_stub_command)
