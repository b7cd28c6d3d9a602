"""``python -m tgrad bench``: check bytes against the oracle and time tgrad against live peers.

Without ``--shape`` the default suite runs (``--list`` shows it; ``--full`` adds the slow
8192-row shapes); ``--graph`` times MLP blocks instead (tgrad.bench.graph). For each shape MxKxN: seeded normal bf16 inputs are made resident, tgrad
computes ``a @ b``, the result is read back and compared byte for byte with
``conformance.oracle.matmul_bits`` (skipped above an oracle size limit unless ``--check-all``),
then tgrad and its peers are timed live, interleaved in this one process (docs/performance.md, how it is measured):

- timed region of tgrad: ``(a @ b).realize()`` with both inputs resident (input creation,
  readback and release excluded); ``tgrad_call`` also times the whole Python call with the
  readback into a new numpy array, ``(a @ b).numpy()`` (shapes up to 2^30 multiply-adds);
- peers, same inputs resident, output computed into host memory, same thread count: numpy
  float32 ``a @ b`` (BLAS threads limited with threadpoolctl), torch bf16 ``torch.matmul`` with
  ``torch.set_num_threads`` (when torch imports), ml_dtypes bfloat16 ``a @ b`` (small shapes only:
  a scalar loop), tinygrad bf16 ``(a @ b).realize()`` on its CPU device (when it imports; not
  above 2^30; timed after the others, paired with tgrad samples of its own phase: SEPARATE_PEERS);
- garbage collection is off while timing; each repetition runs every timed region once, in
  balanced orders (every region directly follows every other one equally often); the raw samples
  are kept, paired by repetition; before a
  region the bench waits until no other thread of the process runs, and a short region gets an
  untimed call right before its timed one (see SPIN_ENV and docs/performance.md);
- with tgrad at T > 1 threads, ``tgrad_1t`` times the same call at one thread (set before the
  clock starts, set back after it stops), paired and reported like a peer;
- ``--cold MS``: no untimed call; the process sleeps MS ms before each timed call, outside the
  clock. ``--contend [NICE]``: a competitor process spins on the last usable CPU at niceness NICE
  (default 0) for the whole run (``contend``). The report's "Condition:" line says which;
- ``--order pairwise|block32``: the accumulation order of tgrad's products (tgrad.matmul_order)
  in every mode; the oracle checks the same order, and the reports name it;
- ``ratio_<peer>`` is the median over repetitions of peer time / tgrad time (> 1: tgrad is
  faster), with a seeded percentile-bootstrap 95% interval; "win" only when the interval is above
  1, "loss" when it is below 1, else "tie". ``ratio_call_<peer>`` compares the peer with tgrad's
  whole Python call.

Output: ``key: value`` lines per shape (the first six are py_shape, py_dtype, py_byte_match,
py_pipeline_ok, py_median_s, py_gflops), then a block naming the files written to ``--out``:
bench.md (tables), bench.json (raw samples, environment, limits) and bench.png (plot; needs
matplotlib). Exit status 1 when bytes differ or a pipeline stage failed, 2 for bad command-line
input. This package imports without torch, matplotlib, tqdm, threadpoolctl or tinygrad.

The package's modules, in the order a run goes through them: ``shapes`` (the suite, MxKxN
parsing, size limits), ``cli`` (the options and the run), ``machine`` (environment record, load
of other processes, re-exec), ``limits`` (measured compute and memory limits, and the limits timed
beside a shape), ``peers`` (the peers and their timed regions), ``measure`` (one shape: pipeline,
byte check, regions, summary), ``timing`` (the interleaved harness), ``stats`` (paired ratios,
bootstrap, verdict), ``lines`` (stdout), ``report`` (bench.md), ``plot`` (bench.png), ``record``
(the JSON's fields, --doc), ``progress`` (the bar), ``contend`` (--contend's competitor
process), and ``graph`` (``--graph``: MLP blocks;
the blocks and their programs in ``graph_blocks``, its reports in ``graph_report``).
"""

from __future__ import annotations

from .cli import add_arguments, run
from .limits import (LIMIT_REGIONS, PAIRED_PEAK_MIN_MACS, STREAM_BYTES, _limit_regions,
                     _paired_limit, _peak, _stream_bandwidth, measure_limits, refresh_limits)
from .lines import _fmt_s, closing_lines, disturbed_warning, format_shape
from .machine import (DISTURBED, ENV_PREFIXES, OPENBLAS_TUNING_VARS, REEXEC_MARK, SPIN_ENV,
                      _blas_summary, _cpu_flags, _cpu_model, _cpu_sample, _maybe_reexec,
                      _others_load, _wait_for_quiet_machine, environment, is_disturbed)
from .measure import run_shape
from .peers import (PEER_LABELS, SEPARATE_PEERS, TINYGRAD_TARGETS, _set_peer_threads, _tinygrad,
                    _torch, _version)
from .plot import write_plot
from .progress import _Progress
from .record import DOC_BEGIN, DOC_END, _command, _finite, _report_head, update_doc
from .report import (_fmt_gflops, _fmt_load, _fmt_ratio, _fmt_time, _load_line, _peer_names,
                     format_markdown)
from .shapes import (CALL_LIMIT_MACS, CALL_TABLE_LIMIT_MACS, DEFAULT_SUITE, FULL_ONLY,
                     ML_DTYPES_LIMIT_MACS, ORACLE_LIMIT_MACS, TINYGRAD_LIMIT_MACS, _bytes_moved,
                     _positive_float, _positive_int, _shape_str, is_memory_bound, parse_shape,
                     parse_shape_list, suite)
from .stats import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, _bootstrap_ratio, _verdict,
                    bootstrap_ratio, verdict)
from .timing import (AUTO_BUDGET_S, AUTO_MAX_REPEAT, AUTO_MIN_REPEAT, HOT_LIMIT_S, QUIET_POLL_S,
                     QUIET_TIMEOUT_S, _auto_repeat, _busy_threads, _interleaved, _separate_phase,
                     _Timed, _wait_quiet)

__all__ = [
    "DEFAULT_SUITE",
    "FULL_ONLY",
    "add_arguments",
    "bootstrap_ratio",
    "format_markdown",
    "format_shape",
    "measure_limits",
    "parse_shape",
    "parse_shape_list",
    "refresh_limits",
    "run",
    "run_shape",
    "suite",
    "update_doc",
    "verdict",
    "write_plot",
]
