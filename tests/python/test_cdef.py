"""The cffi cdef (tgrad/_cdef.py) says exactly what tgrad.h says.

The header is run through the C compiler's preprocessor (expanding the X-macro registry and the
export macro) and parsed with pycparser; the cdef is parsed the same way. Functions (name, return
type, parameter types), typedefs, the status enum and the integer #define constants must agree in
both directions. Also: the loader finds the library and checks its version.
"""

from __future__ import annotations

import ast
import importlib.util
import operator
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pycparser import c_ast, c_parser  # type: ignore[import-untyped, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "libtgrad" / "include" / "tgrad.h"
CDEF_PY = ROOT / "bindings" / "python" / "tgrad" / "_cdef.py"

# Stand-ins for the two system headers tgrad.h includes, so the preprocessed text is plain C that
# pycparser reads; type names (int32_t, size_t) are kept as written, never resolved.
FAKE_STDDEF = "typedef unsigned long size_t;\ntypedef long ptrdiff_t;\n"
FAKE_STDINT = "".join(
    f"typedef {c} {name};\n"
    for name, c in [
        ("int8_t", "signed char"), ("int16_t", "short"), ("int32_t", "int"), ("int64_t", "long long"),
        ("uint8_t", "unsigned char"), ("uint16_t", "unsigned short"), ("uint32_t", "unsigned int"),
        ("uint64_t", "unsigned long long"), ("intptr_t", "long"), ("uintptr_t", "unsigned long"),
    ]
)
FAKE_TYPEDEFS = set(re.findall(r"(\w+);\n", FAKE_STDDEF + FAKE_STDINT))


def load_cdef() -> str:
    """The CDEF text, loaded without importing the package (which would load the library)."""
    spec = importlib.util.spec_from_file_location("_tgrad_cdef_under_test", CDEF_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.CDEF)


def c_compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    raise AssertionError("no C compiler found (cc, gcc, clang): the cdef check needs a preprocessor")


def preprocess(source: str, tmp: Path) -> str:
    fake = tmp / "fake_libc"
    fake.mkdir(exist_ok=True)
    (fake / "stddef.h").write_text(FAKE_STDDEF)
    (fake / "stdint.h").write_text(FAKE_STDINT)
    src = tmp / "probe.c"
    src.write_text(source)
    cmd = [
        *c_compiler().split(), "-E", "-P", "-x", "c", "-std=c11", "-nostdinc",
        "-I", str(fake), "-I", str(HEADER.parent), "-D__attribute__(x)=", str(src),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr}"
    return result.stdout


# ---- a small model of a C API ----------------------------------------------------------------------
@dataclass
class Api:
    functions: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    typedefs: dict[str, str] = field(default_factory=dict)
    enumerators: dict[str, int] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)


def type_str(node: Any) -> str:
    if isinstance(node, c_ast.PtrDecl):
        return " ".join([type_str(node.type) + " *", *node.quals]).strip()
    if isinstance(node, c_ast.ArrayDecl):
        return type_str(node.type) + " []"
    if isinstance(node, c_ast.TypeDecl):
        inner = node.type
        if isinstance(inner, c_ast.IdentifierType):
            base = " ".join(inner.names)
        elif isinstance(inner, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            base = f"{type(inner).__name__.lower()} {inner.name}"
        else:
            raise AssertionError(f"unexpected type node {inner!r}")
        return " ".join([*sorted(node.quals), base])
    if isinstance(node, c_ast.Typename):
        return type_str(node.type)
    if isinstance(node, c_ast.FuncDecl):  # a function type (behind a pointer: a callback)
        params = [type_str(p.type) for p in (node.args.params if node.args else [])]
        return f"{type_str(node.type)} ({', '.join(params)})"
    if isinstance(node, c_ast.Decl):
        return type_str(node.type)
    raise AssertionError(f"unexpected declarator {node!r}")


def const_eval(text: str) -> int | None:
    """An integer constant expression (C literals and + - * / % << >> | & ~ ( )), else None."""
    text = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", text.strip())
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    binops = {
        ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: lambda a, b: int(a / b), ast.Mod: operator.mod, ast.LShift: operator.lshift,
        ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
    }

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in binops:
            return int(binops[type(n.op)](ev(n.left), ev(n.right)))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else (~v if isinstance(n.op, ast.Invert) else v)
        raise ValueError(ast.dump(n))

    try:
        return ev(tree.body)
    except (ValueError, ZeroDivisionError):
        return None


def parse_declarations(c_text: str) -> Api:
    api = Api()
    tree = c_parser.CParser().parse(c_text)
    for ext in tree.ext:
        if isinstance(ext, c_ast.Typedef):
            if ext.name not in FAKE_TYPEDEFS:
                api.typedefs[ext.name] = type_str(ext.type)
        elif isinstance(ext, c_ast.Decl) and isinstance(ext.type, c_ast.FuncDecl):
            fn = ext.type
            params: list[str] = []
            for p in fn.args.params if fn.args else []:
                if isinstance(p, c_ast.EllipsisParam):
                    params.append("...")
                else:
                    params.append(type_str(p.type))
            if params == ["void"]:
                params = []
            api.functions[ext.name] = (type_str(fn.type), tuple(params))
        elif isinstance(ext, c_ast.Decl) and isinstance(ext.type, c_ast.Enum):
            value = -1
            for e in ext.type.values.enumerators:
                value = value + 1 if e.value is None else int(const_eval(e.value.value))  # type: ignore[arg-type]
                api.enumerators[e.name] = value
    return api


def header_api(tmp: Path) -> Api:
    header = HEADER.read_text()
    api = parse_declarations(preprocess('#include "tgrad.h"\n', tmp))
    # Object-like TGRAD_* macros (a name followed by whitespace, not "("), valued by the
    # preprocessor itself so computed ones (TGRAD_VERSION_NUMBER) count too.
    names = sorted(set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(TGRAD_\w+)[ \t]+\S", header, re.M)))
    probe = '#include "tgrad.h"\n' + "".join(f'"{n}": {n}\n' for n in names)
    for line in preprocess(probe, tmp).splitlines():
        m = re.match(r'^"(TGRAD_\w+)":\s*(.*)$', line)
        if m and (value := const_eval(m.group(2))) is not None:
            api.constants[m.group(1)] = value
    return api


def cdef_api(cdef: str) -> Api:
    body = "\n".join(line for line in cdef.splitlines() if not line.lstrip().startswith("#"))
    api = parse_declarations(FAKE_STDDEF + FAKE_STDINT + body)
    for name, value in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(.+?)\s*$", cdef, re.M):
        parsed = const_eval(value)
        assert parsed is not None, f"cdef #define {name} {value}: not an integer literal"
        api.constants[name] = parsed
    return api


def compare(header: Api, cdef: Api) -> list[str]:
    problems: list[str] = []
    for what in ("functions", "typedefs", "enumerators", "constants"):
        h, c = getattr(header, what), getattr(cdef, what)
        for name in sorted(h.keys() - c.keys()):
            problems.append(f"{what}: {name} is in tgrad.h but not in the cdef")
        for name in sorted(c.keys() - h.keys()):
            problems.append(f"{what}: {name} is in the cdef but not in tgrad.h")
        for name in sorted(h.keys() & c.keys()):
            if h[name] != c[name]:
                problems.append(f"{what}: {name} differs: tgrad.h {h[name]!r}, cdef {c[name]!r}")
    return problems


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> Api:
    return header_api(tmp_path_factory.mktemp("cdef"))


@pytest.fixture(scope="module")
def cdef() -> str:
    return load_cdef()


# ---- the cdef agrees with the header ------------------------------------------------------------
def test_header_parse_finds_the_whole_api(header: Api) -> None:
    # Guards the comparator against reading nothing and agreeing with nothing.
    assert len(header.functions) >= 40
    assert header.functions["tgrad_matmul"] == (
        "tgrad_status", ("tgrad_tensor_t", "tgrad_tensor_t", "tgrad_tensor_t *"))
    assert header.functions["tgrad_tensor_from_f32"][1] == (
        "const float *", "int32_t", "const int64_t *", "tgrad_tensor_t *")
    assert header.typedefs == {"tgrad_status": "int32_t", "tgrad_tensor_t": "uint64_t",
                               "tgrad_deleter": "void (void *) *", "tgrad_op": "int32_t",
                               "tgrad_program": "struct tgrad_program",
                               "tgrad_debug_backend": "struct tgrad_debug_backend"}
    assert header.enumerators["TGRAD_ERR_SHAPE_MISMATCH"] == 4
    assert header.enumerators["TGRAD_OP_GELU_TANH"] == 3
    assert header.functions["tgrad_op_name"] == ("const char *", ("tgrad_op",))
    for name in ("TGRAD_MAX_DIMS", "TGRAD_DTYPE_BF16", "TGRAD_DTYPE_F32", "TGRAD_DTYPE_F64",
                 "TGRAD_SLICE_START_NONE", "TGRAD_SLICE_STOP_NONE", "TGRAD_VERSION_MAJOR",
                 "TGRAD_VERSION_MINOR", "TGRAD_VERSION_PATCH", "TGRAD_VERSION_NUMBER"):
        assert name in header.constants, name
    assert header.constants["TGRAD_VERSION_NUMBER"] == (
        header.constants["TGRAD_VERSION_MAJOR"] * 10000
        + header.constants["TGRAD_VERSION_MINOR"] * 100 + header.constants["TGRAD_VERSION_PATCH"])


def test_cdef_matches_header_in_both_directions(header: Api, cdef: str) -> None:
    assert compare(header, cdef_api(cdef)) == []


def test_cdef_is_accepted_by_cffi(cdef: str) -> None:
    import cffi  # type: ignore[import-untyped, unused-ignore]

    ffi = cffi.FFI()
    ffi.cdef(cdef)
    assert ffi.sizeof("tgrad_tensor_t") == 8
    assert ffi.sizeof("tgrad_status") == 4


# ---- the comparator catches what it must catch -------------------------------------------------
ALTERATIONS = [
    ("parameter type", "int32_t axis0, int32_t axis1", "int64_t axis0, int32_t axis1",
     "tgrad_tensor_transpose differs"),
    ("const dropped", "const uint16_t *bits", "uint16_t *bits", "tgrad_tensor_from_bf16 differs"),
    ("return type", "const char *tgrad_cpu_isa(void);", "char *tgrad_cpu_isa(void);",
     "tgrad_cpu_isa differs"),
    ("parameter added", "tgrad_status tgrad_tensor_realize(tgrad_tensor_t tensor);",
     "tgrad_status tgrad_tensor_realize(tgrad_tensor_t tensor, int32_t wait);",
     "tgrad_tensor_realize differs"),
    ("function missing", "int64_t tgrad_live_bytes(void);\n", "",
     "tgrad_live_bytes is in tgrad.h but not in the cdef"),
    ("function extra", "int64_t tgrad_live_bytes(void);\n",
     "int64_t tgrad_live_bytes(void);\nint64_t tgrad_live_pools(void);\n",
     "tgrad_live_pools is in the cdef but not in tgrad.h"),
    ("constant value", "#define TGRAD_MAX_DIMS 8", "#define TGRAD_MAX_DIMS 9", "TGRAD_MAX_DIMS differs"),
    ("constant missing", "#define TGRAD_DTYPE_F64 3\n", "", "TGRAD_DTYPE_F64 is in tgrad.h"),
    ("typedef", "typedef uint64_t tgrad_tensor_t;", "typedef int64_t tgrad_tensor_t;",
     "tgrad_tensor_t differs"),
    ("status renumbered", "TGRAD_ERR_BAD_EXPAND = 7", "TGRAD_ERR_BAD_EXPAND = 70",
     "TGRAD_ERR_BAD_EXPAND differs"),
    ("op renumbered", "TGRAD_OP_SILU = 4", "TGRAD_OP_SILU = 40", "TGRAD_OP_SILU differs"),
]


@pytest.mark.parametrize("old,new,expected", [a[1:] for a in ALTERATIONS], ids=[a[0] for a in ALTERATIONS])
def test_comparator_catches_an_altered_cdef(header: Api, cdef: str, old: str, new: str, expected: str) -> None:
    assert old in cdef, f"alteration anchor {old!r} no longer in the cdef: update this test"
    problems = compare(header, cdef_api(cdef.replace(old, new, 1)))
    assert any(expected in p for p in problems), problems


def test_const_eval_reads_c_literals() -> None:
    assert const_eval("1u") == 1
    assert const_eval("(0 * 10000 + 1 * 100 + 0)") == 100
    assert const_eval("0x10UL") == 16
    assert const_eval('"0.1.0"') is None
    assert const_eval("__declspec(dllexport)") is None


# ---- the loader --------------------------------------------------------------------------------
def test_library_loads_and_reports_its_version(header: Api) -> None:
    import tgrad
    from tgrad._ffi import lib

    assert os.path.exists(tgrad.library_path()) or "tgrad" in tgrad.library_path()
    assert int(lib.tgrad_version()) >= header.constants["TGRAD_VERSION_NUMBER"]
    text = HEADER.read_text()
    version_string = re.search(r'#define TGRAD_VERSION_STRING "([^"]+)"', text)
    assert version_string is not None
    assert tgrad.__version__ == version_string.group(1)
    assert tgrad.version() == version_string.group(1)


def test_check_version_refuses_another_major() -> None:
    import tgrad
    from tgrad._ffi import lib

    number = int(lib.TGRAD_VERSION_NUMBER)
    assert lib.tgrad_check_version(number) == 0
    status = lib.tgrad_check_version(number + 10000)
    assert status == tgrad.errors.VersionMismatchError.status
    with pytest.raises(tgrad.errors.VersionMismatchError):
        tgrad.errors._check(status)


def test_package_dirs_point_inside_the_package() -> None:
    import tgrad

    package = Path(tgrad.__file__).parent
    assert Path(tgrad.include_dir()) == package / "include"
    assert Path(tgrad.pkgconfig_dir()) == package / "pkgconfig"


def test_tgrad_lib_naming_a_missing_file_fails_import_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "libtgrad-nope.so"
    env = dict(os.environ, TGRAD_LIB=str(missing))
    result = subprocess.run(
        [sys.executable, "-c", "import tgrad"], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert str(missing) in result.stderr


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the tgrad package with the loaded library inside it, as an installed wheel has
    (tgrad._native, where built, comes along: TGRAD_NATIVE=1 in nox asks for it)."""
    import tgrad

    package = tmp_path / "site" / "tgrad"
    shutil.copytree(Path(tgrad.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "libtgrad*"))
    shutil.copy(os.path.realpath(tgrad.library_path()), package / "libtgrad.so")
    return package


def _import_in_subprocess(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TGRAD_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


@pytest.mark.skipif(sys.platform != "linux", reason="the copy is named libtgrad.so")
def test_library_inside_the_package_is_found_without_tgrad_lib(tmp_path: Path) -> None:
    package = _package_copy(tmp_path)
    result = _import_in_subprocess(package.parent, "import tgrad; print(tgrad.library_path())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(package / "libtgrad.so")


@pytest.mark.skipif(sys.platform != "linux", reason="the copy is named libtgrad.so")
def test_library_of_another_major_version_fails_import_clearly(tmp_path: Path) -> None:
    package = _package_copy(tmp_path)
    cdef_file = package / "_cdef.py"
    text = cdef_file.read_text()
    # A binding written for major version 1 must refuse this 0.x library.
    text = re.sub(r"#define TGRAD_VERSION_NUMBER \d+", "#define TGRAD_VERSION_NUMBER 10000", text)
    cdef_file.write_text(text)
    result = _import_in_subprocess(package.parent, "import tgrad")
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "10000" in result.stderr, result.stderr
