"""Reproducible random numbers: ``tgrad.random.seed``, ``Generator`` and the torch-style draws
(``tgrad.manual_seed``, ``rand``, ``randn``, ``randint``, ``normal``, ``rand_like``, ``randn_like``).

A generator is a (seed, offset) pair and nothing else. A draw of n elements asks libtgrad for
element i = the pure function of (seed, offset + i) (Philox-4x32-10, ``tgrad_random``; the values
are defined in docs/random.md), then advances the offset by n. So the same seed replays the same
sequence, and the bytes are the same on every thread count, chunking and device. The global
generator starts at seed 0, offset 0 (torch starts from a fixed seed too, with other bits).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from . import errors
from . import dtypes as _dtypes
from ._ffi import lib
from .creation import _shape as _size  # zeros(2, 3), zeros((2, 3)): one rule for sizes
from .tensor import Tensor, _as_int, _device_number, _int64_array, _new_handle, _reports

__all__ = ["Generator", "default_generator", "seed", "manual_seed", "initial_seed", "get_rng_state",
           "set_rng_state", "rand", "randn", "randint", "normal", "uniform", "uniform_", "rand_like", "randn_like"]

_U64 = 1 << 64


def _seed_value(n: Any, what: str) -> int:
    """A seed: an int in [-2^63, 2^64); a negative one is taken modulo 2^64, as torch does."""
    value = _as_int(n, what)
    if not -(1 << 63) <= value < _U64:
        raise errors.InvalidArgumentError(f"{what}: seed {value} is outside [-2^63, 2^64)")
    return value % _U64


def _float(value: Any, what: str) -> float:
    if isinstance(value, Tensor):
        raise errors.InvalidArgumentError(f"{what}: expected a number, got a Tensor (tensor parameters are not supported)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise errors.InvalidArgumentError(f"{what}: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise errors.InvalidArgumentError(f"{what}: {value!r} is beyond float64") from None


class Generator:
    """A counter-based generator: a 64-bit seed and the offset of its next element. Draws through
    it are reproducible: Generator(s) makes the same tensors in the same order every time.
    Thread-safe: each draw takes its offsets under a lock."""

    def __init__(self, seed: Any = 0) -> None:
        self._lock = threading.Lock()
        self._seed = _seed_value(seed, "Generator")
        self._offset = 0

    def manual_seed(self, seed: Any) -> Generator:
        """Restart at `seed`, offset 0; returns the generator (as torch's)."""
        value = _seed_value(seed, "manual_seed")
        with self._lock:
            self._seed, self._offset = value, 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    @property
    def offset(self) -> int:
        """The counter of the next element drawn."""
        return self._offset

    def get_state(self) -> tuple[int, int]:
        """(seed, offset): set_state of it replays what follows."""
        with self._lock:
            return self._seed, self._offset

    def set_state(self, state: tuple[int, int]) -> None:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise errors.InvalidArgumentError("set_state: expected (seed, offset)")
        value = _seed_value(state[0], "set_state")
        offset = _as_int(state[1], "set_state offset")
        if not 0 <= offset < _U64:
            raise errors.InvalidArgumentError(f"set_state: offset {offset} is outside [0, 2^64)")
        with self._lock:
            self._seed, self._offset = value, offset

    def _draw(self, dist: int, shape: tuple[int, ...], dtype: Any, p0: float, p1: float, device: Any) -> Tensor:
        code = 0 if dtype is None else _dtypes.as_dtype(dtype, "random").code
        dev = 0 if device is None else _device_number(device)
        numel = math.prod(shape)
        with self._lock:
            handle = _new_handle(lib.tgrad_random, dist, self._seed, self._offset, len(shape),
                                 _int64_array(shape, "random"), code, p0, p1, dev)
            self._offset += numel  # libtgrad refused an offset + numel past 2^64
        return Tensor._adopt(handle)

    # ---- the draws ----
    def rand(self, *size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """Uniform on [0, 1): multiples of 2^-8 (bfloat16, the default) or 2^-24 (float32)."""
        return self._draw(lib.TGRAD_RANDOM_UNIFORM, _size(size, "rand"), dtype, 0.0, 1.0, device)

    def uniform(self, low: Any, high: Any, *size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """low + (high - low) U with U as rand's, rounded once."""
        return self._draw(lib.TGRAD_RANDOM_UNIFORM, _size(size, "uniform"), dtype, _float(low, "uniform low"),
                          _float(high, "uniform high"), device)

    def randn(self, *size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """Standard normal values (Box-Muller on Philox words, each rounded once)."""
        return self._draw(lib.TGRAD_RANDOM_NORMAL, _size(size, "randn"), dtype, 0.0, 1.0, device)

    def normal(self, mean: Any, std: Any, *size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """mean + std z, z standard normal, rounded once."""
        return self._draw(lib.TGRAD_RANDOM_NORMAL, _size(size, "normal"), dtype, _float(mean, "normal mean"),
                          _float(std, "normal std"), device)

    def randint(self, low: Any, high: Any, *size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """int32 values in [low, high)."""
        lo, hi = _as_int(low, "randint low"), _as_int(high, "randint high")
        if lo >= hi:
            raise errors.InvalidArgumentError(f"randint: low {lo} must be below high {hi}")
        if lo < -(1 << 31) or hi > 1 << 31 or hi - lo >= 1 << 32:
            raise errors.InvalidArgumentError(
                f"randint: [{lo}, {hi}) must lie in int32's range with fewer than 2^32 values")
        return self._draw(lib.TGRAD_RANDOM_RANDINT, _size(size, "randint"), dtype, float(lo), float(hi), device)


#: The global generator that the module-level draws use unless given one.
default_generator = Generator(0)


def _gen(generator: Generator | None) -> Generator:
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise errors.InvalidArgumentError(f"generator: expected a tgrad.random.Generator, got {type(generator).__name__}")
    return generator


def seed(n: Any) -> Generator:
    """Restart the global generator at seed n (offset 0); returns it."""
    return default_generator.manual_seed(n)


manual_seed = seed


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> tuple[int, int]:
    """The global generator's (seed, offset)."""
    return default_generator.get_state()


def set_rng_state(state: tuple[int, int]) -> None:
    default_generator.set_state(state)


@_reports("constant")
def rand(*size: Any, generator: Generator | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
    """torch.rand: uniform on [0, 1) (docs/random.md)."""
    return _gen(generator).rand(*size, dtype=dtype, device=device)


@_reports("constant")
def randn(*size: Any, generator: Generator | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
    """torch.randn: standard normal values, each the correctly rounded exact Box-Muller value."""
    return _gen(generator).randn(*size, dtype=dtype, device=device)


@_reports("constant")
def randint(low: Any, high: Any = None, size: Any = None, *, generator: Generator | None = None, dtype: Any = None,
            device: str | None = None) -> Tensor:
    """torch.randint: randint(high, size) or randint(low, high, size); int32 values in [low, high)."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise errors.InvalidArgumentError("randint: size is required (randint(high, size) or randint(low, high, size))")
        low, high, size = 0, low, high
    if not isinstance(size, (tuple, list)):
        raise errors.InvalidArgumentError(f"randint: size must be a tuple or list, got {type(size).__name__}")
    return _gen(generator).randint(low, high, tuple(size), dtype=dtype, device=device)


@_reports("constant")
def normal(mean: Any, std: Any, size: Any, *, generator: Generator | None = None, dtype: Any = None,
           device: str | None = None) -> Tensor:
    """torch.normal(mean, std, size) for number mean and std: mean + std z, rounded once."""
    if not isinstance(size, (tuple, list)):
        raise errors.InvalidArgumentError(f"normal: size must be a tuple or list, got {type(size).__name__}")
    return _gen(generator).normal(mean, std, tuple(size), dtype=dtype, device=device)


@_reports("constant")
def uniform(low: Any, high: Any, size: Any, *, generator: Generator | None = None, dtype: Any = None,
            device: str | None = None) -> Tensor:
    """Values low + (high - low) U, U as rand's, rounded once."""
    if not isinstance(size, (tuple, list)):
        raise errors.InvalidArgumentError(f"uniform: size must be a tuple or list, got {type(size).__name__}")
    return _gen(generator).uniform(low, high, tuple(size), dtype=dtype, device=device)


def uniform_(shape: Any, low: Any, high: Any, generator: Generator | None = None, dtype: Any = None) -> Tensor:
    """The initializer the nn layers use (torch.nn.init.uniform_'s values, as a new tensor):
    uniform(low, high, shape) from `generator` (the global one by default)."""
    return uniform(low, high, tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), generator=generator,
                   dtype=dtype)


def _like(x: Tensor, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{what}: expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise errors.DtypeUnsupportedError(f"{what}: x is {x.dtype}; pass dtype= a floating dtype")
    return x


def rand_like(x: Tensor, generator: Generator | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
    """rand in x's shape, dtype and device (unless given)."""
    if dtype is None:
        _like(x, "rand_like")
    return rand(x.shape, generator=generator, dtype=x.dtype if dtype is None else dtype,
                device=x.device if device is None else device)


def randn_like(x: Tensor, generator: Generator | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
    """randn in x's shape, dtype and device (unless given)."""
    if dtype is None:
        _like(x, "randn_like")
    return randn(x.shape, generator=generator, dtype=x.dtype if dtype is None else dtype,
                 device=x.device if device is None else device)
