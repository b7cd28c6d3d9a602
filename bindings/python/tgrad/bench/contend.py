"""``bench --contend [NICE]``: a competitor process that spins on one core for the whole timed run,
as a browser tab, a CI neighbour or a second dask task would (issue 23).

The competitor is a child ``python -c`` that pins itself to the last CPU this process may use
(os.sched_setaffinity), lowers its priority by NICE (os.nice), says it is ready, then spins. It is
started before the first shape's warm-up and killed when the run ends, also on an error or Ctrl-C
(a ``finally``); should the bench die without running it (SIGKILL), the competitor sees its parent
change (os.getppid, polled every few ms) and exits on its own. Its CPU time is counted as the
run's own (machine.COUNTED_PIDS), so "others' CPU" still names load from elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from . import machine

#: Seconds the bench waits for the competitor to be pinned and niced, and for it to die.
START_TIMEOUT_S, STOP_TIMEOUT_S = 30.0, 10.0

#: The competitor: argv is (parent pid, cpu, nice). os.nice adds to the niceness it inherits
#: (capped at 19) and returns the result, which it reports. Spins in slices of 5 ms between the
#: checks that its parent is still the bench.
SPINNER = """\
import os, sys, time
parent, cpu, nice = (int(x) for x in sys.argv[1:4])
os.sched_setaffinity(0, {cpu})
print("ready", os.nice(nice), flush=True)
while os.getppid() == parent:
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass
"""


@dataclass
class Competitor:
    """A running competitor: its process, the CPU it spins on, the niceness asked for (added to
    the bench's) and the niceness it runs at."""

    proc: subprocess.Popen[str]
    cpu: int
    nice: int
    niceness: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def condition(self) -> str:
        """The report's condition line."""
        return (f"contended: another process spun on CPU {self.cpu} at nice {self.nice} (niceness "
                f"{self.niceness}) for the whole timed run (its CPU time is not in \"others' "
                f"CPU\")")


def last_cpu() -> int:
    """The CPU the competitor is pinned to: the last one this process may use."""
    return max(os.sched_getaffinity(0))


def start(nice: int, cpu: int | None = None) -> Competitor:
    """Start a competitor and wait until it spins pinned and niced; raises RuntimeError when it
    does not come up (it is killed then)."""
    cpu = last_cpu() if cpu is None else cpu
    proc = subprocess.Popen([sys.executable, "-c", SPINNER, str(os.getpid()), str(cpu), str(nice)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    comp = Competitor(proc, cpu, nice)
    try:
        line = _first_line(proc)
        said = line.split()
        if len(said) != 2 or said[0] != "ready":
            raise RuntimeError(f"the competitor process did not start (exit status "
                               f"{proc.poll()}, said {line!r})")
        comp.niceness = int(said[1])
    except BaseException:
        stop(comp)
        raise
    machine.COUNTED_PIDS.add(proc.pid)
    return comp


def _first_line(proc: subprocess.Popen[str]) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(START_TIMEOUT_S):
            return "(nothing in time)"
    return proc.stdout.readline().strip()


def stop(comp: Competitor) -> None:
    """Kill the competitor and reap it (no process left behind)."""
    machine.COUNTED_PIDS.discard(comp.pid)
    if comp.proc.poll() is None:
        comp.proc.kill()
    comp.proc.wait(STOP_TIMEOUT_S)
    if comp.proc.stdout is not None:
        comp.proc.stdout.close()


@contextmanager
def competing(nice: int | None) -> Iterator[Competitor | None]:
    """A competitor for the body of the `with` when `nice` is not None (bench --contend)."""
    if nice is None:
        yield None
        return
    comp = start(nice)
    try:
        yield comp
    finally:
        stop(comp)
