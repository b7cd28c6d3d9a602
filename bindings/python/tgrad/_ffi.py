"""Loading libtgrad through cffi (ABI mode).

Search order: the TGRAD_LIB environment variable (a path; no fallback when it is set), the library
the wheel ships (in `.tgrad.mesonpy.libs/` beside this package, where meson-python places a library
installed to libdir: the package itself stays pure Python, so the wheel is py3-none-<platform>),
one inside this package's directory, then the system loader's search (ctypes.util.find_library).
The library must accept the header version this binding was written against (tgrad_check_version).
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
from typing import Any

from cffi import FFI  # type: ignore[import-untyped, unused-ignore]

from ._cdef import CDEF

__all__ = ["ffi", "lib", "library_path", "include_dir", "pkgconfig_dir"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
#: Where the wheel's libtgrad lands: meson-python's directory for libraries installed to libdir.
_WHEEL_LIBS_DIR = os.path.join(os.path.dirname(_PACKAGE_DIR), ".tgrad.mesonpy.libs")
# Names the build may give the shared library inside the package, most specific first.
_PACKAGED_PATTERNS = (
    "libtgrad.so",
    "libtgrad.so.*",
    "libtgrad*.so*",
    "libtgrad*.dylib",
    "tgrad*.dll",
    "libtgrad*.dll",
)

# Typed as Any: cdata results are dynamic, and numpy arrays are buffers cffi stubs do not see.
ffi: Any = FFI()
ffi.cdef(CDEF)


def _candidates() -> list[str]:
    found: list[str] = []
    for directory in (_WHEEL_LIBS_DIR, _PACKAGE_DIR):
        for pattern in _PACKAGED_PATTERNS:
            for path in sorted(glob.glob(os.path.join(directory, pattern))):
                if path not in found and os.path.isfile(path):
                    found.append(path)
    return found


def _load() -> tuple[Any, str]:
    env = os.environ.get("TGRAD_LIB")
    if env:
        try:
            return ffi.dlopen(env), env
        except OSError as exc:
            raise ImportError(f"tgrad: cannot load libtgrad from TGRAD_LIB={env!r}: {exc}") from exc
    tried: list[str] = ["TGRAD_LIB (not set)"]
    errors: list[str] = []
    for path in _candidates():
        tried.append(path)
        try:
            return ffi.dlopen(path), path
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    tried.append(f"{os.path.join(_WHEEL_LIBS_DIR, 'libtgrad*')} (the wheel's library directory)")
    tried.append(f"{os.path.join(_PACKAGE_DIR, 'libtgrad*')} (package directory)")
    name = ctypes.util.find_library("tgrad")
    tried.append(f"ctypes.util.find_library('tgrad') -> {name!r}")
    if name:
        try:
            return ffi.dlopen(name), name
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    detail = "; ".join(errors)
    raise ImportError(
        "tgrad: libtgrad not found; tried " + ", ".join(tried) + (f" ({detail})" if detail else "")
        + ". Build it (meson setup build && ninja -C build) and set TGRAD_LIB to the library path."
    )


def _nvrtc_from_wheel() -> str | None:
    """libnvrtc from the nvidia-cuda-nvrtc wheel (the `tgrad[cuda]` extra), if installed: CUDA 13's
    wheel puts it in nvidia/cu13/lib, CUDA 12's in nvidia/cuda_nvrtc/lib."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in list(spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12"):
            if os.path.isfile(os.path.join(root, sub)):
                return os.path.join(root, sub)
    return None


def _point_at_nvrtc() -> None:
    # The CUDA backend dlopens NVRTC by soname when first used; a wheel's copy is not on the loader's
    # path, so name it in TGRAD_NVRTC (unless the user already did). Nothing is loaded here.
    if not os.environ.get("TGRAD_NVRTC"):
        path = _nvrtc_from_wheel()
        if path:
            os.environ["TGRAD_NVRTC"] = path


lib: Any
_library_path: str
lib, _library_path = _load()
_point_at_nvrtc()


def _check_version() -> None:
    wanted = int(lib.TGRAD_VERSION_NUMBER)
    if lib.tgrad_check_version(wanted) != lib.TGRAD_OK:
        have = ffi.string(lib.tgrad_version_string()).decode()
        detail = ffi.string(lib.tgrad_last_error()).decode()
        raise ImportError(
            f"tgrad: {_library_path} is libtgrad {have} (version number {int(lib.tgrad_version())}); "
            f"this binding needs a library compatible with {wanted}"
            + (f": {detail}" if detail else "")
        )


_check_version()


def library_path() -> str:
    """The path (or loader name) of the libtgrad this process loaded."""
    return _library_path


def include_dir() -> str:
    """Directory holding tgrad.h in an installed package."""
    return os.path.join(_PACKAGE_DIR, "include")


def pkgconfig_dir() -> str:
    """Directory holding tgrad.pc in an installed package (add it to PKG_CONFIG_PATH)."""
    return os.path.join(_PACKAGE_DIR, "pkgconfig")


def _string(ptr: Any) -> str:
    """A C string returned by libtgrad (never NULL by contract) as str."""
    if ptr == ffi.NULL:
        return ""
    return str(ffi.string(ptr).decode("utf-8", "replace"))
