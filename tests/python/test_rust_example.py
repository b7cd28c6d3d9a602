"""The Rust example (examples/rust): a Cargo package with no dependencies that calls libtgrad
through `extern "C"` declarations and links it through pkg-config (build.rs).

Core tier: its declarations say what tgrad.h says (each `fn tgrad_...` has the header's parameter
and return types, each `const TGRAD_...` the header's value) and it has no crates to fetch.
Slow tier: cargo builds it, offline, against the installed package's tgrad.pc (or, in a source
tree, against the meson build's library) and it runs, multiplying through views correctly. It skips
only where cargo is absent, and TGRAD_REQUIRE_RUST=1 (CI) makes that a failure too."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import tomllib

import pytest

from test_cdef import Api, header_api

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rust"
MAIN_RS = EXAMPLE / "src" / "main.rs"

# ---- the C types of tgrad.h as Rust spells them ---------------------------------------------------
C_TO_RUST = {
    "int8_t": "i8", "int16_t": "i16", "int32_t": "i32", "int64_t": "i64", "uint8_t": "u8", "uint16_t": "u16",
    "uint32_t": "u32", "uint64_t": "u64", "size_t": "usize", "float": "f32", "double": "f64", "char": "c_char",
}


def rust_of_c(c_type: str, typedefs: dict[str, str]) -> str:
    """The Rust spelling of a C type string as test_cdef writes them ("const int64_t *",
    "tgrad_tensor_t *", "const char * *"): pointers become *const / *mut by the pointee's
    constness, typedefs their underlying type as tgrad.h defines it, void () or c_void."""
    c_type = " ".join(c_type.split())
    pointer = re.fullmatch(r"(.*)\*( const)?", c_type)
    if pointer:
        pointee = pointer.group(1).strip()
        if pointee.endswith("*") or pointee.endswith("* const"):  # a pointer to a pointer
            const = pointee.endswith("const")
            return ("*const " if const else "*mut ") + rust_of_c(pointee, typedefs)
        const = pointee.startswith("const ")
        base = pointee.removeprefix("const ").strip()
        return ("*const " if const else "*mut ") + ("c_void" if base == "void" else rust_of_c(base, typedefs))
    c_type = c_type.removeprefix("const ")
    if c_type == "void":
        return "()"
    if c_type in typedefs:
        return rust_of_c(typedefs[c_type], typedefs)
    if c_type not in C_TO_RUST:
        raise AssertionError(f"no Rust spelling for the C type {c_type!r}: add it to C_TO_RUST")
    return C_TO_RUST[c_type]


# ---- the Rust declarations --------------------------------------------------------------------------
def strip_comments(rust: str) -> str:
    rust = re.sub(r"/\*.*?\*/", " ", rust, flags=re.S)
    return re.sub(r"//[^\n]*", "", rust)


def rust_type(text: str, aliases: dict[str, str]) -> str:
    """A Rust type in one spelling: "*const *mut T", paths (std::ffi::) dropped, aliases resolved."""
    text = re.sub(r"\*\s*(const|mut)\b\s*", r"*\1 ", " ".join(text.split()))
    words = text.split(" ")
    last = re.sub(r"^(?:(?:std|core)::ffi|std::os::raw|libc)::", "", words[-1])
    seen = 0
    while last in aliases and seen < 10:
        last, seen = rust_type(aliases[last], {}), seen + 1
    return " ".join([*words[:-1], last]) if words[:-1] else last


def rust_api(source: str) -> tuple[dict[str, tuple[str, tuple[str, ...]]], dict[str, int]]:
    """Functions (name -> (return, parameter types)) of the extern "C" blocks and TGRAD_ constants."""
    code = strip_comments(source)
    aliases = dict(re.findall(r"\btype\s+(\w+)\s*=\s*([^;]+);", code))
    functions: dict[str, tuple[str, tuple[str, ...]]] = {}
    for block in re.findall(r'extern\s+"C"\s*\{(.*?)\n\}', code, flags=re.S):
        for name, params, ret in re.findall(r"\bfn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^;]+?))?\s*;", block, flags=re.S):
            types = []
            for param in (p.strip() for p in params.split(",")):
                if param:
                    m = re.fullmatch(r"(?:mut\s+)?\w+\s*:(?!:)\s*(.+)", param, flags=re.S)
                    assert m, f"fn {name}: cannot read the parameter {param!r}"
                    types.append(rust_type(m.group(1), aliases))
            functions[name] = (rust_type(ret, aliases) if ret else "()", tuple(types))
    constants = {name: int(value.replace("_", ""), 0)
                 for name, value in re.findall(r"\bconst\s+(TGRAD_\w+)\s*:\s*\w+\s*=\s*(\w+)\s*;", code)}
    return functions, constants


def compare(header: Api, source: str) -> list[str]:
    functions, constants = rust_api(source)
    problems: list[str] = []
    for name, (ret, params) in sorted(functions.items()):
        if name not in header.functions:
            problems.append(f"fn {name} is declared in Rust but is not in tgrad.h")
            continue
        c_ret, c_params = header.functions[name]
        want = (rust_of_c(c_ret, header.typedefs), tuple(rust_of_c(p, header.typedefs) for p in c_params))
        if (ret, params) != want:
            problems.append(f"fn {name} differs: Rust ({', '.join(params)}) -> {ret}, "
                            f"tgrad.h ({', '.join(want[1])}) -> {want[0]}")
    for name, value in sorted(constants.items()):
        known = header.constants.get(name, header.enumerators.get(name))
        if known is None:
            problems.append(f"const {name} is in Rust but not in tgrad.h")
        elif name == "TGRAD_VERSION_NUMBER":
            # The version the declarations were written against: same major, not newer (a newer
            # minor only adds functions, so older declarations stay right).
            if value // 10000 != known // 10000 or value > known:
                problems.append(f"const {name} = {value} is not compatible with tgrad.h's {known}")
        elif value != known:
            problems.append(f"const {name} differs: Rust {value}, tgrad.h {known}")
    return problems


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> Api:
    return header_api(tmp_path_factory.mktemp("rust_header"))


def test_rust_declarations_match_tgrad_h(header: Api) -> None:
    functions, constants = rust_api(MAIN_RS.read_text())
    # Guards the parser against reading nothing and agreeing with nothing.
    assert len(functions) >= 12 and "tgrad_tensor_slice" in functions, sorted(functions)
    assert functions["tgrad_tensor_slice"] == (
        "i32", ("u64", "i32", "i64", "i64", "i64", "u32", "*mut u64"))
    assert {"TGRAD_VERSION_NUMBER", "TGRAD_SLICE_START_NONE", "TGRAD_SLICE_STOP_NONE"} <= constants.keys()
    assert compare(header, MAIN_RS.read_text()) == []


def test_c_types_map_to_rust(header: Api) -> None:
    t = header.typedefs
    assert rust_of_c("const int64_t *", t) == "*const i64"
    assert rust_of_c("tgrad_tensor_t *", t) == "*mut u64"
    assert rust_of_c("tgrad_status", t) == "i32"
    assert rust_of_c("const char * *", t) == "*mut *const c_char"
    assert rust_of_c("const uint16_t * *", t) == "*mut *const u16"
    assert rust_of_c("const void *", t) == "*const c_void"
    assert rust_of_c("size_t", t) == "usize"
    assert rust_of_c("void", t) == "()"


ALTERATIONS = [
    ("parameter type", "axis0: i32, axis1: i32", "axis0: i64, axis1: i32", "fn tgrad_tensor_transpose differs"),
    ("pointer constness", "data: *const f32", "data: *mut f32", "fn tgrad_tensor_from_f32 differs"),
    ("return type", "fn tgrad_live_tensors() -> i64;", "fn tgrad_live_tensors() -> i32;",
     "fn tgrad_live_tensors differs"),
    ("void return", "fn tgrad_live_tensors() -> i64;", "fn tgrad_live_tensors();", "fn tgrad_live_tensors differs"),
    ("parameter dropped", "dst: *mut f32, capacity: usize)", "dst: *mut f32)", "fn tgrad_tensor_read_f32 differs"),
    ("alias", "type tgrad_tensor_t = u64;", "type tgrad_tensor_t = i64;", "fn tgrad_matmul differs"),
    ("unknown function", "fn tgrad_cpu_isa()", "fn tgrad_cpu_isas()", "fn tgrad_cpu_isas is declared in Rust"),
    ("constant value", "TGRAD_SLICE_STOP_NONE: u32 = 2;", "TGRAD_SLICE_STOP_NONE: u32 = 4;",
     "const TGRAD_SLICE_STOP_NONE differs"),
    ("version major", "TGRAD_VERSION_NUMBER: u32 = 100;", "TGRAD_VERSION_NUMBER: u32 = 10100;",
     "const TGRAD_VERSION_NUMBER = 10100 is not compatible"),
]


@pytest.mark.parametrize("old,new,expected", [a[1:] for a in ALTERATIONS], ids=[a[0] for a in ALTERATIONS])
def test_comparator_catches_an_altered_declaration(header: Api, old: str, new: str, expected: str) -> None:
    source = MAIN_RS.read_text()
    assert old in source, f"alteration anchor {old!r} no longer in main.rs: update this test"
    problems = compare(header, source.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


def test_cargo_package_has_no_dependencies() -> None:
    # No crates: `cargo build --offline` needs no registry, on any machine with cargo.
    manifest = tomllib.loads((EXAMPLE / "Cargo.toml").read_text())
    for table in ("dependencies", "build-dependencies", "dev-dependencies", "target"):
        assert not manifest.get(table), f"[{table}] in examples/rust/Cargo.toml"
    lock = (EXAMPLE / "Cargo.lock").read_text()
    assert lock.count("[[package]]") == 1, lock


# ---- built and run ----------------------------------------------------------------------------------
def find_cargo() -> str | None:
    found = shutil.which("cargo")
    if found:
        return found
    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    candidate = os.path.join(home, "bin", "cargo")
    return candidate if os.access(candidate, os.X_OK) else None


def pkg_config_dir(tmp_path: pathlib.Path) -> str:
    """The installed package's tgrad.pc; in a source tree, one written for the meson build's library."""
    import tgrad

    if os.path.isdir(tgrad.pkgconfig_dir()):
        return str(tgrad.pkgconfig_dir())
    libdir = os.path.dirname(os.path.realpath(tgrad.library_path()))
    assert os.path.exists(os.path.join(libdir, "libtgrad.so")), f"no libtgrad.so to link in {libdir}"
    pc = tmp_path / "pkgconfig"
    pc.mkdir()
    (pc / "tgrad.pc").write_text(
        f"libdir={libdir}\nincludedir={ROOT / 'libtgrad' / 'include'}\n\nName: tgrad\n"
        f"Description: the meson build's libtgrad\nVersion: {tgrad.__version__}\n"
        "Libs: -L${libdir} -Wl,-rpath,${libdir} -ltgrad\nCflags: -I${includedir}\n")
    return str(pc)


@pytest.mark.slow
def test_rust_example_builds_with_pkg_config_and_runs(tmp_path: pathlib.Path) -> None:
    cargo = find_cargo()
    if cargo is None:
        message = "cargo is not installed (https://rustup.rs); the Rust example needs no crates"
        if os.environ.get("TGRAD_REQUIRE_RUST") == "1":
            pytest.fail(f"TGRAD_REQUIRE_RUST=1, but {message}")
        pytest.skip(message)
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    assert pkg_config, "pkg-config is needed (nox installs the pkgconf wheel)"
    # The build runs without a preloaded sanitizer runtime (nox -s sanitize preloads ASan for the
    # Python suite; rustc crashes under it); the example then runs with it, against that library.
    sanitizer = {k: v for k, v in os.environ.items() if k == "LD_PRELOAD" or k.endswith("SAN_OPTIONS")}
    env = dict({k: v for k, v in os.environ.items() if k not in sanitizer}, PKG_CONFIG_PATH=pkg_config_dir(tmp_path),
               PKG_CONFIG=pkg_config, PATH=os.pathsep.join([os.path.dirname(cargo), os.environ.get("PATH", "")]))
    target = tmp_path / "target"  # never examples/rust/target: nothing is written into the checkout
    build = subprocess.run(
        [cargo, "build", "--offline", "--locked", "--quiet", "--manifest-path", str(EXAMPLE / "Cargo.toml"),
         "--target-dir", str(target)], env=env, capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    # Only PATH (and a sanitizer runtime if the suite has one): the library is found through the
    # rpath tgrad.pc gave the linker.
    run = subprocess.run([str(target / "debug" / "tgrad-matmul")], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], **sanitizer}, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ", from Rust: 64x48x80 through views, 0 wrong, checksum -7.0, live tensors 0" in run.stdout
