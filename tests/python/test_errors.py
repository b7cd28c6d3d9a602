"""Exceptions are derived from libtgrad's status registry, and _check maps statuses to them."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib

# The frozen part of the registry. Codes below TGRAD_STATUS_UNSTABLE_FROM never change name or
# number: this table is written by hand on purpose, so a renumbering fails here.
FROZEN = {
    0: ("ok", "none"),
    1: ("invalid_argument", "value"),
    2: ("invalid_handle", "lookup"),
    3: ("wrong_handle_kind", "type"),
    4: ("shape_mismatch", "value"),
    5: ("rank_mismatch", "value"),
    6: ("bad_permutation", "value"),
    7: ("bad_expand", "value"),
    8: ("bad_reshape", "value"),
    9: ("index_out_of_range", "index"),
    10: ("dtype_unsupported", "type"),
    11: ("size_overflow", "value"),
    12: ("view_not_expressible", "value"),
    13: ("out_of_memory", "memory"),
    14: ("buffer_too_small", "value"),
}
BUILTINS = {
    "value": ValueError, "type": TypeError, "index": IndexError,
    "memory": MemoryError, "runtime": RuntimeError, "lookup": LookupError, "file": FileNotFoundError,
}


def registry() -> list[tuple[int, str, str, str]]:
    return [
        (s, ffi.string(lib.tgrad_status_name(s)).decode(), ffi.string(lib.tgrad_status_category(s)).decode(),
         ffi.string(lib.tgrad_status_message(s)).decode())
        for s in range(lib.tgrad_status_count())
    ]


def test_frozen_codes_keep_their_names_and_categories() -> None:
    entries = {s: (name, category) for s, name, category, _ in registry()}
    for status, expected in FROZEN.items():
        assert entries[status] == expected, f"status {status} was renamed or renumbered"
    assert lib.TGRAD_STATUS_UNSTABLE_FROM == len(FROZEN)
    assert lib.tgrad_status_count() >= len(FROZEN)


def test_every_non_ok_entry_has_a_class() -> None:
    for status, name, category, message in registry():
        if status == 0:
            assert name not in errors.by_code
            continue
        cls = errors.by_code[name]
        assert errors.by_status[status] is cls
        assert cls.__name__ == "".join(p.capitalize() for p in name.split("_")) + "Error"
        assert getattr(errors, cls.__name__) is cls
        assert cls.__name__ in errors.__all__
        assert cls.__module__ == "tgrad.errors"
        assert cls.code == name and cls.status == status and cls.message == message
        assert issubclass(cls, errors.TgradError)
        assert issubclass(cls, BUILTINS[category]), (name, category)
    assert len(errors.by_code) == lib.tgrad_status_count() - 1


def test_codes_and_class_names_are_unique() -> None:
    names = [name for _, name, _, _ in registry()]
    assert len(set(names)) == len(names)
    assert len({cls.__name__ for cls in errors.by_code.values()}) == len(names) - 1


def test_named_classes_have_their_builtin_bases() -> None:
    assert issubclass(errors.ShapeMismatchError, ValueError)
    assert issubclass(errors.IndexOutOfRangeError, IndexError)
    assert issubclass(errors.InvalidHandleError, LookupError)
    assert issubclass(errors.WrongHandleKindError, TypeError)
    assert issubclass(errors.DtypeUnsupportedError, TypeError)
    assert issubclass(errors.OutOfMemoryError, MemoryError)
    assert issubclass(errors.ViewNotExpressibleError, ValueError)
    assert issubclass(errors.BackendUnavailableError, RuntimeError)
    assert issubclass(errors.FileMissingError, FileNotFoundError) and issubclass(errors.FileMissingError, LookupError)
    assert tgrad.TgradError is errors.TgradError
    assert issubclass(errors.TgradError, Exception)


def test_registry_lookups_outside_the_registry() -> None:
    count = lib.tgrad_status_count()
    for status in (count, -1, 1 << 30):
        assert ffi.string(lib.tgrad_status_name(status)) == b"unknown_status"
        assert ffi.string(lib.tgrad_status_category(status)) == b"unknown"
        assert lib.tgrad_status_message(status) != ffi.NULL


def test_check_returns_on_ok() -> None:
    errors._check(0)  # returns, raises nothing


def test_check_raises_the_class_with_the_library_detail() -> None:
    out = ffi.new("tgrad_tensor_t *")
    status = lib.tgrad_tensor_from_f32(ffi.NULL, -1, ffi.NULL, out)
    assert status == errors.InvalidArgumentError.status
    detail = ffi.string(lib.tgrad_last_error()).decode()
    assert detail
    assert lib.tgrad_last_status() == status
    with pytest.raises(errors.InvalidArgumentError) as info:
        errors._check(status)
    assert info.value.code == "invalid_argument"
    assert info.value.status == status
    assert info.value.detail == detail
    assert str(info.value) == detail


def test_check_falls_back_to_the_registry_message_without_detail() -> None:
    # A fresh thread has had no failure, so its detail is empty.
    caught: list[BaseException] = []

    def run() -> None:
        assert ffi.string(lib.tgrad_last_error()) == b""
        assert lib.tgrad_last_status() == 0
        try:
            errors._check(errors.ShapeMismatchError.status)
        except errors.TgradError as exc:
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(caught) == 1
    exc = caught[0]
    assert isinstance(exc, errors.ShapeMismatchError)
    assert str(exc) == errors.ShapeMismatchError.message
    assert exc.detail == ""


def test_error_detail_is_per_thread() -> None:
    a = tgrad.Tensor.from_numpy(np.zeros((2, 3), np.float32))
    b = tgrad.Tensor.from_numpy(np.zeros((4, 5), np.float32))
    messages: dict[str, str] = {}

    def fail_in_thread() -> None:
        try:
            a.permute(0, 0)
        except errors.BadPermutationError as exc:
            messages["thread"] = str(exc)

    with pytest.raises(errors.ShapeMismatchError) as info:
        a @ b
    thread = threading.Thread(target=fail_in_thread)
    thread.start()
    thread.join()
    assert "permut" in messages["thread"]
    assert ffi.string(lib.tgrad_last_error()).decode() == info.value.detail
    assert lib.tgrad_last_status() == errors.ShapeMismatchError.status


def test_unknown_status_raises_the_base_class() -> None:
    with pytest.raises(errors.TgradError) as info:
        errors._check(999)
    assert type(info.value) is errors.TgradError
    assert info.value.status == 999
    assert info.value.code == "unknown_status"


def test_errors_raised_by_python_carry_their_code() -> None:
    exc = errors.DtypeUnsupportedError("from_numpy: dtype int64")
    assert exc.code == "dtype_unsupported"
    assert exc.status == 10
    assert exc.detail == "from_numpy: dtype int64"
    assert str(exc) == "from_numpy: dtype int64"


def test_errors_pickle_round_trip() -> None:
    exc = errors.IndexOutOfRangeError("select: index 5 is out of range for axis 0 of extent 3")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is errors.IndexOutOfRangeError
    assert back.detail == exc.detail and str(back) == str(exc)


def test_missing_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        errors.NoSuchThingError  # noqa: B018
