"""Sessions (README.md says what each needs and how long it takes on 2 cores):

- `nox -s tests` (the default): the core suite, no torch: the C tests (`meson test`, less the
  `exhaustive` and `long` suites), then the unmarked pytest tier against the pip-installed package,
  then its CPU tests once more per CPU variant this machine runs, forced (TGRAD_CPU_ISA), less the
  one the automatic choice already is on every route.
- `nox -s interop`: the tests marked `interop`, with their peers installed (torch, dask, torchlens).
- `nox -s slow`: the tests marked `slow`: the bench CLI end to end, the commands through pipes, the
  generated-MSL tier on the C++ emulator, the committed scorecards, the long sweeps.
- `nox -s typecheck`: the tests marked `typecheck` (mypy --strict and pyright's checker on the
  installed package, the typed-shapes corpus, the checkpoint stubs).
- `nox -s cuda`: the tests marked `cuda`: the rendered CUDA kernels through nvcc, ptxas and NVRTC
  (no GPU needed), the CUDA emulation tier.
- `nox -s sanitize`, `nox -s fuzz`, `nox -s cross` (aarch64 under qemu-user), `nox -s exhaustive`
  (the 2^32-pair elementwise sweeps, pow's sampled unless `-- full`, and the all-float32 conversion).
- `nox -s bench`: the benchmark suite with live peers.

The pytest tiers are markers (registered in pyproject.toml); TIERS below gives each session's
selection, so every test runs in exactly one of tests, interop, cuda, slow and typecheck. `.ci/run`
runs them all. A new test is unmarked (core) unless it needs a heavy peer (`interop`), runs mypy
(`typecheck`), or takes over about a second on 2 cores (`slow`: a sweep, a child process running
`python -m tgrad`, a compiler)."""

from __future__ import annotations

import os
import pathlib
import shutil

import nox

nox.options.sessions = ["tests"]

ROOT = pathlib.Path(__file__).parent


#: The pytest selection (-m) of each tier's session: a partition of the suite, so every test runs
#: in exactly one session (a test with two tier markers runs in the first that names it here).
TIERS = {
    "interop": "interop",
    "typecheck": "typecheck and not interop",
    "cuda": "cuda and not interop and not typecheck",
    "slow": "slow and not interop and not typecheck and not cuda",
    "tests": "not interop and not typecheck and not slow and not cuda",
}


def _pytest(session: nox.Session, tier: str, env: dict[str, str] | None = None, extra: list[str] | None = None) -> None:
    """pytest on one tier against the package as `pip install .` built it."""
    # Run from tests/ so that the source tree cannot shadow the installed packages. One pytest
    # worker per core (pytest-xdist): most of the suite is single-threaded Python, subprocesses
    # and the oracle, so 2 workers on the CI machine's 2 cores halve its time.
    # TGRAD_POISON_STORAGE=1: every new or reused tensor block starts as the NaN 0x7FA5, so a kernel
    # that leaves an output element unwritten shows up as a wrong byte instead of passing on the
    # allocator's leftovers (the pip-installed library is a release build, where it is off).
    # TGRAD_NATIVE=1: Tensor's hot path must be the C module the install built (ImportError if
    # not); the slow session runs the core tier once more through its Python twin.
    # TGRAD_RENDER_CACHE=verify: every GPU kernel the render cache hands out is rendered again and
    # compared, so a key that misses something a renderer reads fails the step that hit it.
    # PYTHONDONTWRITEBYTECODE="": the test modules' rewritten bytecode is kept (in tests/python's
    # __pycache__, ignored by git) even where the environment sets it, as this sandbox does: else
    # each worker of each run compiles all of them again (collection 8 s against 3 s on 2 cores).
    session.chdir(ROOT / "tests")
    session.run("pytest", "-q", "-n", "auto", "-m", TIERS[tier], "python", *(extra or []), *session.posargs,
                env={"TGRAD_LIB": "", "TGRAD_POISON_STORAGE": "1", "TGRAD_NATIVE": "1", "TGRAD_RENDER_CACHE": "verify",
                     "PYTHONDONTWRITEBYTECODE": "", **(env or {})})


#: Core-tier test files that run no CPU kernel of libtgrad, or nothing a CPU variant could change:
#: left out of the forced-variant reruns of `nox -s tests` (every other core test file runs once
#: per variant). GPU backends and their generators; the ABI's surface and packaging; the two
#: bindings of Tensor's hot path compared (test_native, on whichever variant is in force); the
#: oracle's self-checks and the mpmath reference; file formats; CLI text, the bench harness, docs.
NOT_CPU_KERNEL_TESTS = (
    "cuda_backend", "cuda_device", "opencl", "metal_syntax", "render", "bench_cuda", "devices",
    "abi_symbols", "cdef", "header_fences", "packaging", "c_example", "rust_example", "errors", "op_registry",
    "capabilities", "native",
    "oracle", "elementwise_reference",
    "safetensors", "safetensors_fuzz", "safetensors_stub", "dlpack_fuzz", "dlpack_hostile",
    "bench_format", "bench_timing", "bench_conditions", "cli_help", "docs", "architecture_doc",
    "doc_blocks", "bench_order",
    # the GPU routes on PoCL (the CPU only gives their references, which the CPU tests cover)
    "gpu_batched", "gpu_compare", "gpu_select", "gpu_reduce", "gpu_random", "block32_gpu", "gpu_softmax", "gpu_norm",
    "gpu_rope", "gpu_matmul_f32", "gpu_elementwise_f32", "models_device", "gpu_grad_kinds", "gpu_softmax_backward",
    "gpu_norm_backward", "gpu_transcendental_f32", "gpu_cast",
    # the GGUF writer of the bench's llama.cpp peer (numpy and the format, no kernel choice)
    "gguf_export",
)
#: ... and the files whose tests run every CPU variant themselves (the conformance rosters, the
#: property sweep, the block32 order's kernels): forcing one would repeat them unchanged.
EVERY_VARIANT_TESTS = ("conformance_cpu", "conformance_graphs", "properties", "matmul_order")


def _cpu_test_selection(session: nox.Session) -> tuple[list[str], dict[str, str]]:
    """The core tier's CPU tests, as pytest arguments (the files above ignored, the tests
    parametrized by a variant's name and those marked every_variant deselected), and the CPU
    variants tgrad lists here (name: "1" where this machine runs it)."""
    files = ROOT / "tests" / "python"
    args = []
    for name in NOT_CPU_KERNEL_TESTS + EVERY_VARIANT_TESTS:
        path = files / f"test_{name}.py"
        if not path.exists():
            session.error(f"noxfile.py names {path.name}, which does not exist")
        args.append(f"--ignore=python/{path.name}")
    listed = session.run("python", "-c", _VARIANTS_HERE, silent=True, env={"TGRAD_LIB": "", "TGRAD_CPU_ISA": ""})
    variants = dict(item.split(":") for item in str(listed).split())
    args += ["-k", " and ".join(f"not {name}" for name in [*variants, "every_variant"])]
    return args, variants


#: Prints each CPU variant as name:1 where this machine runs it (name:0 where not), and as name:auto
#: where the automatic choice already is that variant on every route: the packed and the streaming
#: products both take it (cpu_isa, cpu_stream_isa), it is the most capable variant here (which is
#: what the elementwise, exact-sum, norm, rope and optimizer loops take unforced, and what forcing
#: it makes them take), and the block32 order runs its kernel, not AMX (which only the automatic
#: choice takes). There, forcing it runs the same kernels as the core tier's run did: the Zen 4
#: and Zen 5 (avx512bf16) and AVX2-only CPUs; not Intel's AVX512-BF16 Xeons (avx512f packed
#: products, AMX).
_VARIANTS_HERE = """
import tgrad
here = [n for n, ok in tgrad.cpu_isas().items() if ok]
auto = here[0] if tgrad.cpu_isa() == tgrad.cpu_stream_isa() == here[0] and tgrad.matmul_order_kernel("block32") != "amx" else ""
print(*(f"{n}:{'auto' if n == auto else int(ok)}" for n, ok in tgrad.cpu_isas().items()))
"""


def _pytest_each_cpu_variant(session: nox.Session) -> None:
    """The core tier's CPU tests once more per CPU variant this machine runs, each forced with
    TGRAD_CPU_ISA (matmul micro-kernels and elementwise loops alike), so that no test depends on
    which variant the automatic choice picks here (issue 38). Left out: the files above, the tests
    parametrized by a variant's name and those marked every_variant (they set each variant
    themselves), and the variant the automatic choice already is on every route (_VARIANTS_HERE)."""
    args, variants = _cpu_test_selection(session)
    for variant, here in variants.items():
        if here == "auto":
            session.log(f"TGRAD_CPU_ISA={variant} left out: the automatic choice above ran its kernels on every route")
        elif here == "1":
            session.log(f"the CPU tests with TGRAD_CPU_ISA={variant}")
            _pytest(session, "tests", env={"TGRAD_CPU_ISA": variant}, extra=args)


@nox.session
def tests(session: nox.Session) -> None:
    """The core suite, with no torch: C tests (meson test) then pytest's unmarked tier against the
    package as `pip install .` builds it, then its CPU tests once more with each CPU variant this
    machine runs forced."""
    session.install("meson>=1.3", "ninja")
    build = pathlib.Path(session.create_tmp()) / "build-c"
    shutil.rmtree(build, ignore_errors=True)
    session.run("meson", "setup", str(build), "--buildtype=debugoptimized", "-Dfault_injection=true")
    # The `long` suite (all 2^32 float32 conversions) runs in `nox -s exhaustive`.
    session.run("meson", "test", "-C", str(build), "--print-errorlogs", "--no-suite", "long")
    session.install(".[test]", "pkgconf")  # pkgconf: test_c_example builds against the installed copy
    _pytest(session, "tests")
    _pytest_each_cpu_variant(session)


@nox.session
def interop(session: nox.Session) -> None:
    """The tests marked `interop`: DLPack and safetensors with torch (a CPU wheel of exactly TORCH),
    tgrad.dask on a local distributed cluster, tgrad as a torchlens backend, tgrad.models against transformers' own
    Llama, Mistral and Qwen2. Every peer must be there: the session checks the
    imports first, and TGRAD_REQUIRE_INTEROP=1 makes an interop test that skips fail."""
    session.install(".[test,dask,torchlens,models]", TORCH, TRANSFORMERS, GGUF)
    session.run("python", "-c", "import torch, dask.array, distributed, torchlens, transformers, tokenizers, gguf")
    _pytest(session, "interop", env={"TGRAD_REQUIRE_INTEROP": "1"})


@nox.session
def slow(session: nox.Session) -> None:
    """The tests marked `slow`: the bench end to end (with its plot and progress extras), every
    command through pipes and in child processes, the generated-MSL tier on the C++ emulator (its
    compiled kernels are cached in MSL_EMU_CACHE, by default under the temp directory), the
    committed scorecards regenerated, the property and mpmath sweeps, the C and Rust examples
    built against the installed package through pkg-config. Then the core tier's CPU tests again
    with TGRAD_NATIVE=0: Tensor's hot path through its Python twin (tgrad/_tensor_base.py), the
    one a source tree without the C module uses."""
    session.install(".[test,bench,examples]", "pkgconf")
    _pytest(session, "slow", env={"TGRAD_REQUIRE_EXAMPLES": "1"})  # the digits example's test may not skip
    session.chdir(ROOT)
    # The Python twin is four methods (a @ b, realize(), numpy(), the release): the core tier's CPU
    # tests (the selection of the forced-variant reruns above, about 2,000 tests) run every one of
    # them through it, on the automatic variant, with their errors and edge cases. The files
    # that selection leaves out test no Tensor product path a binding could change (the ABI's
    # surface, docs, the oracle, formats, GPU routes whose work is in the library) or repeat
    # every CPU variant's kernels (bytes the binding only passes along); test_native compares
    # the two bindings call by call in child interpreters, whichever is in force. Until
    # 2026-12-04 this reran the whole core tier (about 3,700 tests, twice the time).
    args, _ = _cpu_test_selection(session)
    _pytest(session, "tests", env={"TGRAD_NATIVE": "0"}, extra=args)


@nox.session
def cuda(session: nox.Session) -> None:
    """The tests marked `cuda`, which need the CUDA toolkit's compilers but no GPU: every rendered
    kernel of the conformance roster through nvcc and ptxas (sm_80, sm_90), NVRTC from the `cuda`
    extra's wheel compiling them as the backend does, and the CUDA emulation tier. With
    TGRAD_REQUIRE_CUDA_TOOLS=1 a missing nvcc, ptxas or NVRTC fails a test instead of skipping it."""
    session.install(".[test,cuda]")
    _pytest(session, "cuda", env={"TGRAD_REQUIRE_CUDA_TOOLS": "1"})


#: Slow-tier tests that `nox -s sanitize` leaves to `nox -s slow` (which runs them unsanitized):
#: each repeats, over more input values, kernel calls whose shapes, routes and slow paths the
#: core tier's samples of the same ops already run under ASan, or loads no libtgrad of this
#: build at all. About 30% of the sanitized pytest run's CPU time, and no memory path of its own.
UNSANITIZED_ONLY = (
    # all 2^32 bf16 pairs of pow: 65,536 calls of one 65,536-element kernel (3 min under ASan);
    # the core tier's pow tests take the same kernel and its exact slow path on samples
    "test_pow.py::test_bf16_pow_every_pair_is_decided",
    "test_pow.py::test_float32_pow_large_random_sweep",
    # 10^6 random pairs and 10^5 random inputs per float32 op against exact references (most of
    # the unary sweep's time is mpmath); the core tier's specials, edges, samples and hard inputs
    # of every op run the same kernels and slow path
    "test_elementwise_f32_reference.py::test_binary_sweep",
    "test_elementwise_f32_reference.py::test_transcendental_sweep",
    # a fresh wheel built by pip and used from another directory: those child processes drop
    # TGRAD_LIB and LD_PRELOAD, so they load the wheel's own (unsanitized) library
    "test_packaging.py::test_built_wheel_is_abi3_platform_with_its_license_and_one_top_level_package",
    "test_packaging.py::test_documented_commands_run_from_any_directory_against_the_installed_wheel",
)


@nox.session
def sanitize(session: nox.Session) -> None:
    """libtgrad and its C tests under AddressSanitizer + UndefinedBehaviorSanitizer (with fault
    injection, so every failed allocation is also checked for leaks), the Python suite against that
    build, and the concurrency test under ThreadSanitizer."""
    session.install("meson>=1.3", "ninja")
    tmp = pathlib.Path(session.create_tmp()).resolve()
    asan, tsan = tmp / "build-asan", tmp / "build-tsan"
    for build in (asan, tsan):
        shutil.rmtree(build, ignore_errors=True)
    strict = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    session.run("meson", "setup", str(asan), "--buildtype=debugoptimized", "-Db_sanitize=address,undefined",
                "-Db_lundef=false", "-Dfault_injection=true")
    # The 'long' suite's sweeps (every float32 conversion, every a with every 13th b of the GPU
    # elementwise text) add minutes under ASan and no memory path the quick tests miss: `nox -s
    # exhaustive` runs them, unsanitized, in CI's time budget.
    session.run("meson", "test", "-C", str(asan), "--print-errorlogs", "--no-suite", "long", env=strict)
    # The Python suite against the sanitized library (loaded through TGRAD_LIB, the ASan runtime
    # preloaded into the interpreter). CPython's own allocations are not ours: leaks are checked
    # by the C tests above and the live-object counters here. allocator_may_return_null: an
    # allocation too big for any machine returns NULL, as without ASan, so numpy raises MemoryError
    # (which tgrad turns into OutOfMemoryError: tests/python/test_memory_limit.py) instead of ASan
    # aborting the interpreter.
    session.install(".[test,cuda,dask]")  # cuda: NVRTC, so the CUDA backend's compile path runs here too; dask: its interop test
    libasan = str(session.run("gcc", "-print-file-name=libasan.so", silent=True, external=True)).strip()
    # pytest's node ids are relative to its rootdir, the repository's root (pyproject.toml holds
    # its settings), whatever the working directory: tests/python/test_x.py::test_y.
    deselect = [f"--deselect=tests/python/{test}" for test in UNSANITIZED_ONLY]
    session.chdir(ROOT / "tests")
    # A stale name or a wrong prefix would deselect nothing, silently: each listed test must
    # exist, and none may be left in a collection of their files with the options below.
    for test in UNSANITIZED_ONLY:
        file, name = test.split("::")
        if f"def {name}(" not in (ROOT / "tests" / "python" / file).read_text():
            session.error(f"noxfile.py's UNSANITIZED_ONLY names {test}, which does not exist")
    files = sorted({f"python/{test.split('::')[0]}" for test in UNSANITIZED_ONLY})
    collected = str(session.run("pytest", "--collect-only", "-q", *files, *deselect, silent=True, env={"TGRAD_LIB": ""}))
    left = [line for line in collected.splitlines() for test in UNSANITIZED_ONLY if line.startswith(f"tests/python/{test}")]
    if left:
        session.error(f"UNSANITIZED_ONLY deselected nothing of {left[0]} (node ids changed?)")
    session.run("pytest", "-q", "-x", "-n", "auto", "python",
                "-k", "not msl_emu and not cuda_emu and not cuda_compile and not bench and not render",
                "-m", "not typecheck",  # mypy loads no libtgrad; the emulators and compilers neither
                *deselect,
                *session.posargs,
                env={"TGRAD_LIB": str(asan / "libtgrad" / "libtgrad.so"), "LD_PRELOAD": libasan, "TGRAD_NATIVE": "1",
                     "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1", "UBSAN_OPTIONS": strict["UBSAN_OPTIONS"],
                     "TGRAD_POISON_STORAGE": "1"})
    session.chdir(ROOT)
    session.run("meson", "setup", str(tsan), "--buildtype=debugoptimized", "-Db_sanitize=thread")
    session.run("meson", "test", "-C", str(tsan), "--print-errorlogs", "threads", "elementwise-threads", "schedule", "fusion", "elementwise-nodes",
                env={"TSAN_OPTIONS": "halt_on_error=1"})


CROSS_FILE = """[binaries]
c = 'aarch64-linux-gnu-gcc'
ar = 'aarch64-linux-gnu-ar'
strip = 'aarch64-linux-gnu-strip'
exe_wrapper = ['qemu-aarch64', '-L', '/usr/aarch64-linux-gnu']

[host_machine]
system = 'linux'
cpu_family = 'aarch64'
cpu = 'aarch64'
endian = 'little'
"""


@nox.session
def cross(session: nox.Session) -> None:
    """libtgrad for aarch64 (the NEON variant) cross-compiled, and its C tests run under qemu-user:
    every variant against the portable one on special values, shape classes and forced blockings,
    plus the thread and kernel-generation tests. Needs gcc-aarch64-linux-gnu and qemu-user (the
    Debian packages .ci/run installs). The all-float32 conversion test is left to native runs (it
    takes minutes under emulation)."""
    for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64"):
        if not shutil.which(tool):
            session.error(f"{tool} not found: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")
    session.install("meson>=1.3", "ninja")
    tmp = pathlib.Path(session.create_tmp()).resolve()
    cross_file, build = tmp / "aarch64.ini", tmp / "build-aarch64"
    cross_file.write_text(CROSS_FILE)
    shutil.rmtree(build, ignore_errors=True)
    session.run("meson", "setup", str(build), "--cross-file", str(cross_file), "--buildtype=release")
    # TGRAD_TEST_EMULATED=1: test_abi's variant sweeps check NEON against the portable reference
    # without the portable variant's own reruns (the native runs check those): half the session.
    session.run("meson", "test", "-C", str(build), "--print-errorlogs", "--timeout-multiplier", "5",
                "abi", "threads", "gen", "overflow", "schedule", "fusion-quick", "matmul-f32", "matmul-block32", "elementwise-nodes", "elementwise-unary", "elementwise-specials", "elementwise-threads",
                "elementwise-binary-sampled", env={"TGRAD_TEST_EMULATED": "1"})


@nox.session
def exhaustive(session: nox.Session) -> None:
    """The long sweeps: every binary elementwise op but pow over all 2^32 bf16 input pairs on every
    CPU variant against a double reference (tests/c/test_elementwise.c; about 4 minutes on 2
    cores), and pow over every a with every 13th b (2 minutes more), in
    the `exhaustive` meson suite; the GPU elementwise text against the CPU loops and all 2^32
    float32 patterns through the conversion (tests/c/test_convert.c), in the `long` suite: both
    left out of `nox -s tests`.
    `nox -s exhaustive -- full` adds pow over all 2^32 pairs (the `exhaustive-pow` suite: about
    19 minutes more on 2 cores, which CI's hour cannot spare)."""
    if session.posargs not in ([], ["full"]):
        session.error("nox -s exhaustive takes no argument but `full`")
    session.install("meson>=1.3", "ninja")
    build = (pathlib.Path(session.create_tmp()) / "build-exhaustive").resolve()
    shutil.rmtree(build, ignore_errors=True)
    session.run("meson", "setup", str(build), "--buildtype=release")
    full = ["--suite", "exhaustive-pow"] if session.posargs == ["full"] else []
    session.run("meson", "test", "-C", str(build), "--print-errorlogs", "--suite", "exhaustive", "--suite", "long", *full)


@nox.session
def fuzz(session: nox.Session) -> None:
    """libFuzzer (clang) on the C API, each target checked against an independent model
    (tests/fuzz): random view chains and matmul arguments (`views`), caller memory viewed
    through tgrad_tensor_from_external (`external`), and random graphs of elementwise ops,
    products and views realized fused and unfused, which must give the same bytes (`graph`). `nox -s fuzz -- SECONDS` per target (default
    300); CI runs 30. The library is built with ASan+UBSan too, so a memory error anywhere fails
    the run. Then the hypothesis properties over forged DLPack capsules, mutated safetensors
    files and ndarrays that lie about their layout, with TGRAD_FUZZ_EXAMPLES examples each (`nox -s tests` runs them with a few dozen)."""
    seconds = session.posargs[0] if session.posargs else "300"
    session.install("meson>=1.3", "ninja")
    build = (pathlib.Path(session.create_tmp()) / "build-fuzz").resolve()
    shutil.rmtree(build, ignore_errors=True)
    env = {"CC": "clang"}
    session.run("meson", "setup", str(build), "--buildtype=debugoptimized", "-Dfuzz=true",
                "-Db_sanitize=address,undefined", "-Db_lundef=false", env=env)
    session.run("ninja", "-C", str(build))
    for target in ("views", "external", "graph"):
        corpus = ROOT / "tests" / "fuzz" / "corpus" / target
        scratch = pathlib.Path(session.create_tmp()) / f"corpus-{target}"  # new finds stay out of the tree
        scratch.mkdir(exist_ok=True)
        session.run(str(build / "tests" / "fuzz" / f"fuzz_{target}"), f"-max_total_time={seconds}",
                    "-print_final_stats=1", str(scratch), str(corpus), external=True)
    examples = str(max(200, 10 * int(seconds)))
    session.install(".[test]")
    session.chdir(ROOT / "tests")
    session.run("pytest", "-q", "-n", "auto", "python/test_dlpack_fuzz.py", "python/test_safetensors_fuzz.py",
                "python/test_hostile_arrays.py",
                env={"TGRAD_LIB": "", "TGRAD_FUZZ_EXAMPLES": examples})


@nox.session
def typecheck(session: nox.Session) -> None:
    """The tests marked `typecheck`: `mypy --strict` and pyright's checker (basedpyright, strict)
    on the package as `pip install .` builds it, with its optional typed dependencies present
    (tests/python/test_typing.py); the corpus of typed programs (tests/typecheck) and the
    safetensors stubs, each program's expected errors from both checkers."""
    session.install(".[test,dask,typecheck]")
    session.run("basedpyright", "--version")  # the checker is in the wheel: nothing is fetched later
    _pytest(session, "typecheck")


#: The peer the issue's targets are stated against; a CPU wheel of exactly this version.
TORCH = "torch==2.13.0"
#: The peer of tgrad.models (tests/python/test_models_interop.py).
TRANSFORMERS = "transformers==5.25.0"
#: The tinygrad of DESIGN §7's anchors; pure Python (its CPU device compiles its own kernels).
TINYGRAD = "tinygrad==0.14.0"
#: The model bench's llama.cpp peer (`bench --model`): llama.cpp's own GGUF writer, and its Python
#: binding, which builds llama.cpp from source (about 10 minutes on 2 cores, then pip's cache).
GGUF = "gguf==0.19.0"
LLAMA_CPP = "llama-cpp-python==0.3.36"
#: Variables that make numpy's OpenBLAS use other kernels or cache sizes than it would pick on
#: this CPU (they slow numpy down): unset for the bench, and recorded in its JSON as unset.
OPENBLAS_TUNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark suite against live peers: `nox -s bench -- --threads 2` (arguments after
    `--` go to `python -m tgrad bench`; e.g. `--full`, `--shape 1024x1024x1024`, `--out DIR`).
    Writes bench-out/bench.md, bench.json and bench.png."""
    session.install(".[bench]")
    for peer in (TORCH, TRANSFORMERS, TINYGRAD, GGUF, LLAMA_CPP):  # transformers: the model bench's peer; llama-cpp-python builds llama.cpp (minutes, once: pip caches it)
        try:
            session.install(peer)
        except nox.command.CommandFailed:
            session.log(f"{peer} is not installable here: it is left out of the peers")
    session.chdir(ROOT)
    was = {name: os.environ[name] for name in OPENBLAS_TUNING if name in os.environ}
    env: dict[str, str | None] = {name: None for name in OPENBLAS_TUNING}  # None: unset
    env["TGRAD_BENCH_UNSET"] = ",".join(f"{k}={v}" for k, v in was.items())
    env["TGRAD_BENCH_LAUNCHER"] = "nox -s bench"  # the command the report quotes
    if was:
        session.log("unset for the bench: " + ", ".join(f"{k} (was {v})" for k, v in was.items()))
    session.run("python", "-m", "tgrad", "bench", *session.posargs, env=env)
