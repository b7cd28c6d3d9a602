"""``bench --cold MS`` and ``bench --contend [NICE]`` (issue 23), and tgrad at one thread timed
beside tgrad at T threads: the competitor process is started, pinned, niced and never left
behind; the options are validated; the one-thread region appears only for T > 1 and leaves the
thread count as it was; the report names the condition. No test here asserts a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tgrad
from tgrad.bench import contend, machine, measure, report
from tgrad.bench.peers import ONE_THREAD

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not Path("/proc").is_dir(),
                                reason="the competitor pins itself with sched_setaffinity (Linux)")


def gone(pid: int) -> bool:
    """No such process, or only its zombie (an orphan waits there for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


# ---- the competitor ------------------------------------------------------------------------------


@linux_only
@pytest.mark.parametrize("nice", [0, 10])
def test_the_competitor_spins_pinned_and_niced_and_is_killed(nice: int) -> None:
    with contend.competing(nice) as comp:
        assert comp is not None
        pid = comp.pid
        os.kill(pid, 0)  # alive: raises if not
        assert os.sched_getaffinity(pid) == {max(os.sched_getaffinity(0))} == {comp.cpu}
        # os.nice adds to the bench's niceness, up to 19 (the tests may run under `nice`)
        want = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
        assert os.getpriority(os.PRIO_PROCESS, pid) == comp.niceness == want
        assert pid in machine.COUNTED_PIDS
        assert f"at nice {nice}" in comp.condition()
    with pytest.raises(ProcessLookupError):  # killed and reaped: nothing left
        os.kill(pid, 0)
    assert pid not in machine.COUNTED_PIDS


@linux_only
def test_the_competitor_is_killed_when_the_run_fails() -> None:
    pids = []
    with pytest.raises(KeyboardInterrupt):
        with contend.competing(0) as comp:
            assert comp is not None
            pids.append(comp.pid)
            raise KeyboardInterrupt  # Ctrl-C in the middle of the run
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_no_competitor_without_contend() -> None:
    with contend.competing(None) as comp:
        assert comp is None


@linux_only
def test_a_competitor_that_does_not_come_up_is_an_error_and_leaves_nothing(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(contend, "SPINNER", "import sys; print('nope', flush=True); "
                        "import time; time.sleep(60)")
    with pytest.raises(RuntimeError, match="did not start"):
        contend.start(0)
    assert not machine.COUNTED_PIDS


@linux_only
@pytest.mark.slow  # a child python that starts a competitor and is killed
def test_the_competitor_exits_when_the_bench_dies() -> None:
    """SIGKILL leaves no `finally` to run: the competitor notices its parent changed."""
    code = ("from tgrad.bench import contend\n"
            "c = contend.start(0)\n"
            "print(c.pid, flush=True)\n"
            "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert not gone(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    parent.stdout.close()
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(pid)


def test_the_competitors_cpu_time_counts_as_the_runs_own(monkeypatch: Any) -> None:
    me = machine._cpu_sample()
    if me is None:
        pytest.skip("no /proc")
    monkeypatch.setattr(machine, "_pid_ticks", lambda pid: 1000)
    monkeypatch.setattr(machine, "COUNTED_PIDS", {12345})
    assert machine._cpu_sample()[3] >= me[3] + 1000  # type: ignore[index]


# ---- the command line ----------------------------------------------------------------------------


def run_main(capsys: Any, *argv: str) -> tuple[int, str]:
    from tgrad.__main__ import main

    try:
        status = main(["bench", *argv])
    except SystemExit as exc:  # argparse's usage errors
        status = int(exc.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--cold", "-5"], "argument --cold: expected milliseconds >= 0, got '-5'"),
    (["--cold", "nan"], "argument --cold: expected milliseconds >= 0, got 'nan'"),
    (["--cold", "soon"], "argument --cold: expected milliseconds >= 0, got 'soon'"),
    (["--contend", "-1"], "argument --contend: expected a niceness 0..19, got '-1'"),
    (["--contend", "20"], "argument --contend: expected a niceness 0..19, got '20'"),
    (["--contend", "--wait-quiet", "5"], "--wait-quiet would wait for nothing"),
    (["--cold", "5", "--graph"], "--cold and --contend time matmul shapes, not --graph"),
])
def test_bad_condition_options_are_usage_errors(capsys: Any, argv: list[str],
                                                message: str) -> None:
    status, err = run_main(capsys, *argv, "--shape", "4x4x4", "--no-reexec", "--out",
                           "/nonexistent")
    assert status == 2
    assert message in err


def test_contend_without_a_value_is_nice_zero() -> None:
    from tgrad.__main__ import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench", "--contend"]).contend == 0
    assert parser.parse_args(["bench", "--contend", "10"]).contend == 10
    assert parser.parse_args(["bench"]).contend is None
    assert parser.parse_args(["bench", "--cold", "0"]).cold == 0.0


# ---- tgrad at one thread, beside tgrad at T threads ------------------------------------------


@pytest.fixture
def threads() -> Any:
    was = tgrad.num_threads()
    yield tgrad.set_num_threads
    tgrad.set_num_threads(was)


@pytest.mark.parametrize("t", [1, 2, 3])
def test_tgrad_at_one_thread_is_timed_only_beside_more_threads(threads: Any, t: int) -> None:
    threads(t)
    res = measure.run_shape((8, 8, 8), repeat=2, peers=False, limits_paired=False)
    assert res["pipeline_ok"], res["errors"]
    assert (ONE_THREAD in res["regions"]) is (t > 1)
    assert (ONE_THREAD in res["peers"]) is (t > 1)
    assert tgrad.num_threads() == t  # set back after every call
    if t > 1:
        entry = res["peers"][ONE_THREAD]
        assert entry["threads"] == "1" and "call" not in entry  # against tgrad's realize only
        assert len(res["samples"][ONE_THREAD]) == len(res["samples"]["tgrad"]) == 2


def test_the_one_thread_region_runs_at_one_thread_and_restores(threads: Any) -> None:
    threads(3)
    seen = []
    region = measure._tgrad_region(ONE_THREAD, None, None, 1, 3)
    region.call = lambda: seen.append(tgrad.num_threads())
    region.once()
    assert seen == [1] and tgrad.num_threads() == 3
    ours = measure._tgrad_region("tgrad", None, None, 3, 3)  # the same calls, with T
    ours.call = lambda: seen.append(tgrad.num_threads())
    ours.once()
    assert seen == [1, 3] and tgrad.num_threads() == 3 and ours.before is not None


def test_cold_regions_sleep_before_every_timed_call(threads: Any) -> None:
    threads(2)
    slept: list[float] = []
    res = measure.run_shape((8, 8, 8), repeat=3, peers=False, limits_paired=False, cold_s=0.004,
                            sleep=slept.append)
    assert res["cold_s"] == 0.004 and not any(res["hot"].values())
    # tgrad, tgrad_call and tgrad_1t, three rounds each
    assert slept == [0.004] * 9 and len(res["regions"]) == 3


# ---- the report names the condition ----------------------------------------------------------


def test_the_report_names_the_condition_and_the_one_thread_region() -> None:
    from test_bench_format import fake_report

    rep = fake_report()
    plain = report.format_markdown(rep)
    assert "Condition:" not in plain and "tgrad 1 thread" not in plain
    rep["condition"] = "cold: the process slept 5 ms before each timed call"
    small = rep["results"][0]
    small["peers"] = {ONE_THREAD: {"median_s": 9e-6, "gflops": 58.0, "ratio": 2.0, "lo": 1.9,
                                   "hi": 2.1, "verdict": "win", "threads": "1"},
                      **small["peers"]}
    text = report.format_markdown(rep)
    assert "Condition: cold: the process slept 5 ms before each timed call  \n" in text
    assert "tgrad 1 thread / tgrad time" in text and "2.00 [1.90, 2.10] win" in text
    assert "tgrad 1 thread / tgrad call" not in text  # no whole-call ratio for it
    from tgrad.bench.lines import closing_lines

    lines = closing_lines(rep, Path("out"), "out/bench.png", None, None)
    assert "bench_condition: cold: the process slept 5 ms before each timed call" in lines


@linux_only
@pytest.mark.slow  # a bench run in a child process
def test_a_cold_contended_run_reports_its_condition_and_one_thread(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tgrad", "bench", "--shape", "8x8x8",
                           "--repeat", "3", "--threads", "2", "--cold", "1", "--contend", "3",
                           "--no-reexec", "--no-peers", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    cond = next(x for x in lines if x.startswith("bench_condition: "))
    assert "slept 1 ms before each timed call" in cond and "at nice 3" in cond
    assert "peer_tgrad_1t_threads: 1" in lines
    assert any(x.startswith("ratio_tgrad_1t: ") for x in lines)
    md = (tmp_path / "bench.md").read_text()
    assert "Condition: cold: the process slept 1 ms" in md and "tgrad 1 thread / tgrad time" in md
