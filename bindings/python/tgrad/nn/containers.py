"""Sequential and ModuleList: modules holding numbered children, as torch's containers do."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, overload

from .. import errors
from .module import Module

__all__ = ["ModuleList", "Sequential"]


def _module(value: Any, user: str) -> Module:
    if not isinstance(value, Module):
        raise errors.InvalidArgumentError(f"{user}: expected a tgrad.nn.Module, got {type(value).__name__}")
    return value


class _Numbered(Module):
    """Children named "0", "1", ... (the paths of state_dict: "layers.0.mlp.up_proj.weight")."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> _Numbered:
        self.add_module(str(len(self)), _module(module, f"{type(self).__name__}.append"))
        return self

    def extend(self, modules: Iterable[Module]) -> _Numbered:
        for module in modules:
            self.append(module)
        return self

    def _list(self) -> list[Module]:
        return list(self.children())

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._list())

    @overload
    def __getitem__(self, index: int) -> Module: ...
    @overload
    def __getitem__(self, index: slice) -> _Numbered: ...
    def __getitem__(self, index: int | slice) -> Module | _Numbered:
        if isinstance(index, slice):
            part = type(self).__new__(type(self))
            _Numbered.__init__(part, self._list()[index])
            return part
        if isinstance(index, bool) or not isinstance(index, int):
            raise errors.InvalidArgumentError(f"{type(self).__name__} index must be an int or slice, got {index!r}")
        if not -len(self) <= index < len(self):
            raise errors.IndexOutOfRangeError(f"{type(self).__name__} index {index} is out of range for {len(self)} modules")
        return self._list()[index]

    def __setitem__(self, index: int, module: Module) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not -len(self) <= index < len(self):
            raise errors.IndexOutOfRangeError(f"{type(self).__name__} index {index!r} is out of range for {len(self)} modules")
        self.add_module(str(index % len(self)), _module(module, f"{type(self).__name__}[{index}] ="))


class Sequential(_Numbered):
    """Runs its modules in order, each on the previous one's output: Sequential(a, b)(x) = b(a(x))."""

    def __init__(self, *modules: Module) -> None:
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x


class ModuleList(_Numbered):
    """A list of modules whose parameters are the list's (run them yourself: it has no forward)."""
