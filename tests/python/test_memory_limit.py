"""The memory limit (issue 33, case 5): a tensor larger than the limit is refused when it is made,
with OutOfMemoryError, before anything is allocated; every allocation failure, numpy's included,
is OutOfMemoryError. Default limit: the machine's physical memory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import tgrad
from tgrad import errors


@pytest.fixture
def limit() -> Iterator[None]:
    yield
    tgrad.set_memory_limit(None)


def physical_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_the_default_limit_is_the_machines_memory() -> None:
    assert tgrad.memory_limit() == physical_memory()


def test_a_1e15_element_broadcast_is_refused_when_written_not_when_realized() -> None:
    column = tgrad.Tensor.from_numpy(np.ones((100_000, 1), np.float32))
    one = tgrad.Tensor.from_numpy(np.ones((1, 1), np.float32))
    wide = one.expand(1, 10_000_000_000)  # a zero-copy view of one element
    before = tgrad.live_buffers()
    with pytest.raises(errors.OutOfMemoryError, match="memory limit"):
        column + wide  # 10^15 elements, 2*10^15 bytes
    with pytest.raises(errors.OutOfMemoryError):
        column * wide
    assert tgrad.live_buffers() == before  # nothing was made
    assert (column + one.expand(1, 3)).shape == (100_000, 3)


@pytest.mark.usefixtures("limit")
def test_every_way_of_making_a_tensor_obeys_a_limit_that_was_set() -> None:
    a = tgrad.Tensor.from_numpy(np.ones((512, 512), np.float32))  # 512 KiB
    tgrad.set_memory_limit(256 * 1024)
    assert tgrad.memory_limit() == 256 * 1024
    for make in (lambda: a @ a, lambda: a + 1, lambda: a.relu(), lambda: a.T.reshape(-1),
                 lambda: a.T.contiguous(), lambda: tgrad.Tensor.from_numpy(np.ones((512, 512), np.float32))):
        with pytest.raises(errors.OutOfMemoryError, match="memory limit"):
            make()
    small = a[:256]  # a view allocates nothing: allowed
    assert (small[:128] + 1).shape == (128, 512)  # 128 KiB: under the limit
    tgrad.set_memory_limit(None)
    assert tgrad.memory_limit() == physical_memory()
    assert (a @ a).shape == (512, 512)


@pytest.mark.usefixtures("limit")
@pytest.mark.parametrize("bad", [-1, 1.5, "1G", True, 1 << 63])
def test_a_bad_limit_is_refused_and_changes_nothing(bad: object) -> None:
    before = tgrad.memory_limit()
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_memory_limit(bad)  # type: ignore[arg-type]
    assert tgrad.memory_limit() == before


def test_the_environment_sets_the_limit_at_start_up() -> None:
    code = "import tgrad; print(tgrad.memory_limit())"
    env = {**os.environ, "TGRAD_MEMORY_LIMIT": "123456"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "123456"


@pytest.mark.usefixtures("limit")
def test_numpys_memory_error_reading_back_is_out_of_memory() -> None:
    # 2^61 bf16 elements (2^62 bytes): no machine maps that, whatever its overcommit policy.
    tgrad.set_memory_limit((1 << 63) - 1)
    one = tgrad.Tensor.from_numpy(np.ones((1, 1), np.float32))
    huge = one.expand(1 << 31, 1) + one.expand(1, 1 << 30)
    assert huge.shape == (1 << 31, 1 << 30)
    for read in (huge.numpy, lambda: huge.numpy(np.float32), huge.realize, huge.to_bytes):
        with pytest.raises(errors.OutOfMemoryError):
            read()
