"""The machine a run is on: what the JSON records about it (CPU, libraries, environment
variables), how much of it other processes used while timing (/proc/stat), and the re-exec that
shortens the peers' idle spinning."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from .peers import _torch, _version

#: A share of the machine's CPU time used by other processes (or stolen by the hypervisor)
#: above which the report flags a run or a shape as disturbed.
DISTURBED = 0.05
#: Idle spinning of the peers' thread pools, shortened for the bench process. After a call,
#: OpenBLAS's workers spin for 2^28 cycles (~0.1 s) and torch's OpenMP (libgomp) workers for
#: ~7 ms; on 2 cores a spinning thread of one library takes a core from the next one timed
#: (torch after numpy took 4-8 ms instead of 60 us at 127x255x511), and waiting it out lets the
#: idle vCPU be descheduled (4 ms stalls on wake-up). 2^19 cycles and 10000 spins are ~0.2 ms:
#: longer than the gap between a region's untimed and timed call, so a library still runs hot.
#: Set only where unset; the bench re-executes itself once to apply them (they are read when
#: the libraries load), see --no-reexec.
SPIN_ENV = {"OPENBLAS_THREAD_TIMEOUT": "19", "GOMP_SPINCOUNT": "10000"}
REEXEC_MARK = "TGRAD_BENCH_REEXEC"
#: Environment variables recorded in the JSON (by prefix) because they change a peer's speed.
ENV_PREFIXES = ("TGRAD_", "OPENBLAS_", "OMP_", "MKL_", "GOTO", "BLIS_", "KMP_", "DNNL_",
                "ONEDNN_", "TORCH_", "ATEN_", "PYTHONHASHSEED", "CPU", "CLANG", "TINYGRAD_",
                "GOMP_", "DEV", "NUM_CPU_THREADS", "CC")
#: Variables that make numpy's OpenBLAS pick other kernels or block sizes; ``nox -s bench``
#: unsets them (and says so through TGRAD_BENCH_UNSET, recorded in the JSON).
OPENBLAS_TUNING_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

CpuSample = tuple[int, int, int, int]
#: Child processes whose CPU time counts as this run's own in a CpuSample (bench --contend's
#: competitor: the load it adds is the condition measured, not a disturbance).
COUNTED_PIDS: set[int] = set()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    wanted = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16",
              "avx_vnni", "avx512_vnni"}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(wanted & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def _env_list(name: str) -> list[str]:
    return [v for v in os.environ.get(name, "").split(",") if v]


def environment() -> dict[str, Any]:
    """What the JSON records about the machine, the libraries and the environment variables."""
    import tgrad

    env: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "tgrad_library": tgrad.version(),
        "tgrad_cpu_isa": tgrad.cpu_isa(),
        "tgrad_cpu_stream_isa": tgrad.cpu_stream_isa(),
        "tgrad_cpu_isas": tgrad.cpu_isas(),
        "tgrad_threads": tgrad.num_threads(),
        "versions": {name: _version(name) for name in
                     ("numpy", "ml_dtypes", "cffi", "torch", "threadpoolctl", "matplotlib",
                      "tqdm", "tinygrad")},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "unset_by_launcher": _env_list("TGRAD_BENCH_UNSET"),
        "set_by_reexec": _env_list(REEXEC_MARK),
    }
    try:
        # No stubs or py.typed: untyped where installed, missing where not.
        import threadpoolctl  # type: ignore[import-untyped, import-not-found, unused-ignore]

        env["threadpools"] = threadpoolctl.threadpool_info()
    except ImportError:
        env["threadpools"] = "threadpoolctl not installed"
    env.update(_torch_environment())
    return env


def _torch_environment() -> dict[str, Any]:
    torch = _torch()
    if torch is None:
        return {}
    env: dict[str, Any] = {}
    try:
        env["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:
        pass
    env["torch_threads"] = torch.get_num_threads()
    env["torch_mkldnn"] = bool(torch.backends.mkldnn.is_available())
    try:
        env["torch_config"] = torch.__config__.show()
    except Exception:
        pass
    return env


def _blas_summary(env: dict[str, Any]) -> str:
    pools = env.get("threadpools")
    if not isinstance(pools, list):
        return str(pools)
    blas = [p for p in pools if p.get("user_api") == "blas"]
    return "; ".join(f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')} "
                     f"kernels, {p.get('num_threads')} threads)" for p in blas) or "none found"


def _cpu_sample() -> CpuSample | None:
    """(all CPU time, idle time, steal time, this process's time and COUNTED_PIDS') in clock
    ticks; None without
    /proc. Two samples tell how much of the machine other processes used in between."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
    except (OSError, ValueError):
        return None
    return sum(v), v[3] + v[4], v[7], _ticks(stat) + sum(map(_pid_ticks, COUNTED_PIDS))


def _ticks(stat: str) -> int:
    """utime + stime of a /proc/PID/stat line."""
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])


def _pid_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return _ticks(f.read())
    except (OSError, ValueError):  # gone
        return 0


def _others_load(before: CpuSample | None, after: CpuSample | None) -> dict[str, float] | None:
    """Shares of the machine's CPU time between two samples: used by other processes, and
    stolen by the hypervisor. Either one high means the timings were disturbed."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    total = after[0] - before[0]
    busy = total - (after[1] - before[1]) - (after[2] - before[2])
    ours = after[3] - before[3]
    return {"others": max(0.0, (busy - ours) / total), "steal": (after[2] - before[2]) / total}


def is_disturbed(load: dict[str, float] | None) -> bool:
    """Whether other processes and the hypervisor together took more than DISTURBED."""
    if not load:
        return False
    return load["others"] + load["steal"] > DISTURBED


def _wait_for_quiet_machine(limit_s: float, window_s: float = 0.5) -> float | None:
    """Wait (sleeping) until other processes used under DISTURBED of the CPU time over a window,
    at most `limit_s` seconds; returns the seconds waited, None when nothing was waited for."""
    if limit_s <= 0 or _cpu_sample() is None:
        return None
    start = time.perf_counter()
    while True:
        before = _cpu_sample()
        time.sleep(window_s)
        load = _others_load(before, _cpu_sample())
        waited = time.perf_counter() - start
        if load is None or load["others"] + load["steal"] < DISTURBED or waited >= limit_s:
            return waited


def _maybe_reexec(args: Any) -> None:
    """Run this command again in a fresh interpreter with SPIN_ENV set where it is unset: the
    thread pools read it when they load, which was before this point. Only when this process was
    started as ``python -m tgrad bench ...`` (so its argv can be replayed) and only once."""
    missing = {k: v for k, v in SPIN_ENV.items() if k not in os.environ}
    if args.no_reexec or args.no_peers or not missing or os.environ.get(REEXEC_MARK):
        return
    main = Path(sys.argv[0])
    if main.name != "__main__.py" or main.parent.name != "tgrad" or "bench" not in sys.argv[1:]:
        print("note: peers' idle thread pools spin (set "
              + " ".join(f"{k}={v}" for k, v in missing.items())
              + " before start-up to shorten it)", file=sys.stderr)
        return
    env = dict(os.environ, **missing, **{REEXEC_MARK: ",".join(missing)})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "tgrad", *sys.argv[1:]], env)
