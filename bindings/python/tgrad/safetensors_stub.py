"""Type stubs for a checkpoint's names and shapes (`python -m tgrad safetensors-stub`).

The stub is a tree of Protocol classes, one per prefix of the tensor names, named by its path
(``model.layers[i].mlp`` -> ``ModelLayersItemMlp``: two prefixes whose subtrees look alike still
get two classes). Each tensor is typed with its shape (``weight: Tensor[Literal[4096],
Literal[11008]]``, so a product against the checkpoint's real extents is checked). A prefix whose
parts are all numbers (``model.layers``) is a sequence: ``layers[0]``, ``layers[1:3]``, ``len``
and ``for`` give one item class, the items' subtrees merged (an extent they disagree on becomes
unknown). Each class has tgrad.safetensors.Node's API, ``load() -> Self`` (the same tree, its
tensors read at once) among it, and `Checkpoint` has tgrad.safetensors.Checkpoint's. A .pyi cannot
be imported at run time; the recipe (docs/typing.md) imports it for checkers only:

    from typing import TYPE_CHECKING, cast
    import tgrad
    if TYPE_CHECKING:
        from model import Checkpoint     # model.pyi, next to this file or on the checker's path
    w = cast("Checkpoint", tgrad.safetensors.open("ckpt/"))
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any, NamedTuple, Union

__all__ = ["stub_text"]

#: A name tree: a dict per prefix, a leaf per tensor (its shape, or None where the items of a list
#: disagree on it).
_Tree = dict[str, Any]
#: Names a tree node answers itself (tgrad.safetensors.Node), so no tensor part can use them.
_NODE_API = ("load", "tensors", "names", "children")
#: Node's API as each class of the stub declares it.
_NODE_METHODS = ["    def load(self) -> Self: ...", "    def tensors(self) -> dict[str, Tensor]: ...",
                 "    def names(self) -> list[str]: ...", "    def children(self) -> list[str]: ..."]
#: Names the Checkpoint answers itself, at the top of the tree.
_CHECKPOINT_API = ("schema", "load", "keys", "path", "convert", "root", "close")


class _Leaf(NamedTuple):
    shape: Union[tuple[int, ...], None]


def _tree(schema: Mapping[str, Any]) -> _Tree:
    root: _Tree = {}
    for name, info in schema.items():
        node = root
        parts = name.split(".")
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):  # a name that is also a prefix: keep the subtree
                child = node[p] = {}
            node = child
        if not isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = _Leaf(tuple(info.shape))
    return root


def _merge(a: Any, b: Any) -> Any:
    """One item type for the items of a list: attributes united, a shape kept where all agree."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, value in b.items():
            out[key] = _merge(out[key], value) if key in out else value
        return out
    if isinstance(a, dict) or isinstance(b, dict):
        return a if isinstance(a, dict) else b
    return a if a == b else _Leaf(None)


def _tensor_type(leaf: _Leaf) -> str:
    if not leaf.shape:  # unknown (the items disagree) or 0-d: any extents
        return "Tensor"
    return "Tensor[" + ", ".join(f"Literal[{d}]" for d in leaf.shape) + "]"


def _class_name(path: list[str]) -> str:
    return "".join(p.capitalize() for part in path for p in part.replace("-", "_").split("_") if p) or "Root"


def _is_sequence(tree: _Tree) -> bool:
    """A prefix whose next parts are all numbers: Node indexes it (``layers[0]``)."""
    return bool(tree) and all(c.isdigit() for c in tree)


class _Writer:
    def __init__(self) -> None:
        self.classes: list[str] = []
        self.taken: set[str] = {"Checkpoint", "Tensor", "TensorInfo"}

    def name(self, path: list[str]) -> str:
        base = _class_name(path)
        name, k = base, 2
        while name in self.taken:  # "a_b" and "ab" would both be "AB"
            name, k = f"{base}{k}", k + 1
        self.taken.add(name)
        return name

    def node(self, tree: _Tree, path: list[str]) -> str:
        name = self.name(path)
        members = self.members(tree, path, _NODE_API)
        self.classes.append("\n".join([f"class {name}(Protocol):", *members, *_NODE_METHODS]))
        return name

    def members(self, tree: _Tree, path: list[str], reserved: tuple[str, ...]) -> list[str]:
        lines: list[str] = []
        if _is_sequence(tree):
            merged: Any = None
            for sub in tree.values():
                merged = sub if merged is None else _merge(merged, sub)
            elem = self.kind(merged, [*path, "item"])
            return ["    @overload", f"    def __getitem__(self, index: int) -> {elem}: ...",
                    "    @overload", f"    def __getitem__(self, index: slice) -> list[{elem}]: ...",
                    "    def __len__(self) -> int: ...", f"    def __iter__(self) -> Iterator[{elem}]: ..."]
        for child, sub in tree.items():
            if not child.isidentifier() or keyword.iskeyword(child) or child in reserved:
                lines.append(f"    # {child!r}: not an attribute name here; use [{child!r}]")
                continue
            lines.append(f"    {child}: {self.kind(sub, [*path, child])}")
        return lines

    def kind(self, sub: Any, path: list[str]) -> str:
        return _tensor_type(sub) if isinstance(sub, _Leaf) else self.node(sub, path)


_CHECKPOINT = '''class Checkpoint(Protocol):
    """tgrad.safetensors.Checkpoint of this file, its names as attributes."""

    path: Path
    convert: bool
    schema: dict[str, TensorInfo]
    @property
    def root(self) -> Root: ...
    def keys(self) -> list[str]: ...
    def __getitem__(self, name: str) -> Tensor: ...
    def __contains__(self, name: object) -> bool: ...
    def __len__(self) -> int: ...
    def load(self, names: Sequence[str] | None = None) -> dict[str, Tensor]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...
'''


def stub_text(schema: Mapping[str, Any], source: str) -> str:
    """The .pyi text for a checkpoint of that schema (name -> TensorInfo), read from `source`."""
    writer = _Writer()
    tree = _tree(schema)
    members = writer.members(tree, [], _CHECKPOINT_API + _NODE_API)  # the top names, once
    root = writer.name([])
    writer.classes.append("\n".join([f"class {root}(Protocol):", *members, *_NODE_METHODS]))
    # Checkpoint's [] takes full names: a tree that is a sequence at the top is walked from .root
    checkpoint = _CHECKPOINT.replace("-> Root:", f"-> {root}:") + ("" if _is_sequence(tree) else "\n".join(members))
    body = "\n\n\n".join([checkpoint, *writer.classes])
    # only the names the classes use (pyright reports an unused import in a stub too)
    used = {n for n in ("Iterator", "Literal", "overload") if f"{n}[" in body or f"@{n}" in body} | {
        "Sequence", "Protocol", "Self"}
    source = source.replace("\\", "\\\\").replace('"', '\\"')  # a directory's name, inside the docstring
    head = (f'"""Names and shapes of {source}: generated by `python -m tgrad safetensors-stub`.\n\n'
            "    from typing import TYPE_CHECKING, cast\n"
            "    if TYPE_CHECKING:\n"
            "        from model import Checkpoint   # this file, saved as model.pyi\n"
            "    w = cast(\"Checkpoint\", tgrad.safetensors.open(path))\n"
            "    w.model.layers[0].self_attn.q_proj.weight   # a Tensor typed with its shape\n"
            "    w.model.layers[0].load()                    # that subtree, read now, typed alike\n\"\"\"\n\n"
            f"from collections.abc import {', '.join(n for n in ('Iterator', 'Sequence') if n in used)}\n"
            "from pathlib import Path\nfrom types import TracebackType\n"
            f"from typing import {', '.join(n for n in ('Literal', 'Protocol', 'Self', 'overload') if n in used)}\n\n"
            "from tgrad import Tensor\nfrom tgrad.safetensors import TensorInfo\n")
    return head + "\n\n" + body + "\n"
