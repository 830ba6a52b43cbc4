"""Issue 46 (1), the other places a long log's lines were held: a run whose only log is the job's (srun's stdout of
every rank, a Kubernetes pod's log), and the payload's own MBRIDGE_ROUTING line that every rank prints each iteration.

Own inputs: the benchmark's Megatron-Bridge and refit lines (benchmarks/log_parse_scale.py, ``job=True``) in
``stdout.txt`` with ``srun --label`` prefixes and another rank's lines interleaved; a rank log with a routing line
after every iteration line (``routing=True``). Each test measures the Python memory a parse holds at its peak
(tracemalloc) beyond that of the same iterations parsed from a plain rank log, per iteration, and checks that the
numbers are those of the rank log. Before: 930, 538 and 694 B an iteration (each line held as text until the parse
ended); the limit is 150 B."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import log_parse_scale as bench

from cloudai_mbridge.metrics import parse_refit_run, parse_training_run

PER_LINE = 150  # bytes of Python memory a parse may add at its peak per line moved or added (before: 500-850 B)
N = 10_000


def _peak(parse, run: Path):
    tracemalloc.start()
    try:
        m = parse(run)
        return m, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _extra_per_line(parse, write, plain, tmp_path: Path):
    """(what the parse of ``write``'s run holds at its peak beyond that of ``plain``'s run of the same N iterations,
    per iteration; the first's metrics, the second's)."""
    # every import and buffer made before the first measurement (a log of 2 MiB or more gets scan.py's numpy filter)
    parse(write(tmp_path / "warm", N // 2))
    parse(plain(tmp_path / "warm-plain", N // 2))
    m, peak = _peak(parse, write(tmp_path / "run", N))
    ref, ref_peak = _peak(parse, plain(tmp_path / "plain", N))
    return (peak - ref_peak) / N, m, ref


def _rank_log(write):
    def plain(root: Path, n: int) -> Path:
        write(root, n)
        return root
    return plain


def _training_in_stdout(root: Path, n: int) -> Path:
    bench.write_training(root, n, job=True)
    return root


def test_a_training_run_whose_only_log_is_the_jobs_holds_no_line_per_iteration(tmp_path: Path) -> None:
    per, m, ref = _extra_per_line(parse_training_run, _training_in_stdout, _rank_log(bench.write_training), tmp_path)
    assert len(m.iterations) == N and "iterations_from_job_logs" in m.problems
    assert per < PER_LINE, f"{per:.0f} B an iteration more than from the last rank's own log"
    # the same numbers as the same lines in the last rank's own log
    assert [(r.iteration, r.elapsed_ms, r.lm_loss) for r in m.iterations] == [
        (r.iteration, r.elapsed_ms, r.lm_loss) for r in ref.iterations]
    assert m.iteration_time_ms == ref.iteration_time_ms


def _refit_in_stdout(root: Path, n: int) -> Path:
    bench.write_refit(root, n, job=True)
    return root


def test_a_refit_run_whose_only_log_is_the_jobs_holds_no_line_per_iteration(tmp_path: Path) -> None:
    per, m, ref = _extra_per_line(parse_refit_run, _refit_in_stdout, _rank_log(bench.write_refit), tmp_path)
    assert m.time_ms.n == N and "refit_from_job_logs" in m.problems
    assert per < PER_LINE, f"{per:.0f} B an iteration more than from rank 0's own log"
    # rank 0's times only, the same as from its own log; rank 1's error line still found
    assert (m.time_ms.n, m.time_ms.mean, m.time_ms.median) == (ref.time_ms.n, ref.time_ms.mean, ref.time_ms.median)
    assert any(f.rank == 1 and "NCCL error" in f.detail for f in m.failure.findings), m.failure.findings


def _training_with_routing(root: Path, n: int) -> Path:
    bench.write_training(root, n, routing=True)
    return root


def test_the_routing_line_of_every_iteration_is_held_as_a_few_numbers(tmp_path: Path) -> None:
    per, m, ref = _extra_per_line(parse_training_run, _training_with_routing, _rank_log(bench.write_training),
                                  tmp_path)
    assert m.status == "ok" and len(m.routing) == N and len(m.dispatcher_ms) == N and not ref.routing
    assert per < PER_LINE, f"{per:.0f} B a routing line"
    assert m.routing[(0, 17)] == f"{17 * 2654435761 % (1 << 64):016x}" and m.dispatcher_ms[(0, 17)] == (3.5, 2.25)
    assert dict(m.routing.items()) == {(0, i): f"{i * 2654435761 % (1 << 64):016x}" for i in range(1, N + 1)}
