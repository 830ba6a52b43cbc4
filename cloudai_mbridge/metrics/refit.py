"""Refit run logs -> timed iterations, transfer statistics, the weight check and the payload's own summary.

The refit payload prints on rank 0 (exact forms)::

    REFIT_ITER iter=<i> time_ms=<float>                  one per timed iteration (warm-up already excluded)
    REFIT_STATS bytes_remote=<int> bytes_local=<int> send_ops=<int> recv_ops=<int>
    REFIT_VERIFY status=<pass|fail> params=<n> mismatched=<n> detail=<text>
    Mean refit time: <x> ms          Min refit time:  <x> ms          Max refit time:  <x> ms
    Median refit time: <x> ms        Effective bandwidth: <x> GB/s
    REFIT_RESULT {json}                                 last line of a finished run

The payload (``payload/refit/__main__.py``) also prints ``REFIT_VERIFY status=skipped`` when verification
is off, ``-1`` for byte counts it could not find, ``Effective bandwidth: n/a GB/s``, and on any rank
``REFIT_ERROR phase=<phase> rank=<r> message=<json>`` before it exits; on a failed verification it prints no
``REFIT_ITER`` line and no summary. All of these are read as what they say (unknown, skipped, a failure).

Values are recomputed from the ``REFIT_ITER`` lines and checked against the printed summary (to the printed
precision): a disagreement means lines were lost or the summary covers other iterations, and is reported as
``summary_mismatch`` rather than trusted. Lines cut by the end of the file are not used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import signals
from .frames import frame
from .layout import load_layout
from .scan import LogLine, Marker, scan_run
from .stats import STALL_FACTOR, Stats, iteration_time_problem, steady_state

if TYPE_CHECKING:
    import pandas as pd

REFIT = Marker("refit", (b"REFIT_", b"refit time:", b"Effective bandwidth:"))
REFIT_ERROR = Marker("refit_error", (b"REFIT_ERROR",))

_FLOAT = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,18})?"
# Counts are at most 18 digits (int64): a longer run of digits is damage (and int() refuses more than 4300 digits).
_COUNT = r"\d{1,18}"
# Any time_ms token is read (nan/inf included): one that is not a real time makes the run invalid, not unseen.
_ITER_RE = re.compile(rf"REFIT_ITER\s+iter=(?P<iter>{_COUNT})\s+time_ms=(?P<ms>\S+)(?=\s|$)")
_STATS_RE = re.compile(
    rf"REFIT_STATS\s+bytes_remote=(?P<remote>-?{_COUNT})\s+bytes_local=(?P<local>-?{_COUNT})"
    rf"\s+send_ops=(?P<send>-?{_COUNT})\s+recv_ops=(?P<recv>-?{_COUNT})(?=\s|$)"
)
_VERIFY_RE = re.compile(
    rf"REFIT_VERIFY\s+status=(?P<status>pass|fail|skipped)\s+params=(?P<params>{_COUNT})"
    rf"\s+mismatched=(?P<mismatched>{_COUNT})(?:\s+detail=(?P<detail>.*))?$"
)
_SUMMARY_RE = re.compile(rf"(?P<which>Mean|Min|Max|Median) refit time:\s+(?P<ms>{_FLOAT}) ms\b")
_BANDWIDTH_RE = re.compile(rf"Effective bandwidth:\s+(?P<gbps>{_FLOAT}) GB/s")
_RESULT_RE = re.compile(r"REFIT_RESULT\s+(?P<json>\{.*\})\s*$")

STATUS_ORDER = (
    "no_logs",
    "failed",
    "bad_iteration_time",
    "no_iterations",
    "missing_rank_log",
    "truncated",
    "no_result",
    "summary_mismatch",
    "unreadable_log",
    "missing_config",
    "invalid_config",
)
REFIT_FAILURE_MARKERS = (*signals.FAILURE_MARKERS, signals.EFA, signals.SOCKET)
JOB_PLAN = signals.job_log_markers((*REFIT_FAILURE_MARKERS, REFIT))
RANK0_PLAN = (*REFIT_FAILURE_MARKERS, REFIT)
OTHER_RANK_PLAN = (*REFIT_FAILURE_MARKERS, REFIT_ERROR)


@dataclass(frozen=True)
class RefitVerify:
    status: str
    params: int
    mismatched: int
    detail: str = ""


@dataclass(frozen=True)
class RefitRunMetrics:
    run_dir: Path
    status: str
    problems: tuple[str, ...]
    config: Mapping[str, Any]
    world_size: int | None
    iterations: tuple[tuple[int, float], ...]
    time_ms: Stats
    printed: Mapping[str, float]
    bandwidth_gbps: float | None
    bytes_remote: int | None
    bytes_local: int | None
    send_ops: int | None
    recv_ops: int | None
    verify: RefitVerify | None
    result: Mapping[str, Any] | None
    validity: signals.ValiditySignals
    failure: signals.FailureReport
    time_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> dict[str, Any]:
        t = self.time_ms
        return {
            "run_dir": str(self.run_dir),
            "status": self.status,
            "problems": ",".join(self.problems),
            "failure": self.failure.primary,
            **self.failure.reason(),
            "bad_iteration_times": "; ".join(self.time_errors) or None,
            "n": t.n,
            "time_ms_mean": t.mean,
            "time_ms_median": t.median,
            "time_ms_min": t.min,
            "time_ms_max": t.max,
            "time_ms_p10": t.p10,
            "time_ms_p90": t.p90,
            "stalls": t.n_stalls,
            "bandwidth_gbps": self.bandwidth_gbps,
            "bytes_remote": self.bytes_remote,
            "bytes_local": self.bytes_local,
            "verify": self.verify.status if self.verify else None,
            "mismatched": self.verify.mismatched if self.verify else None,
        }

    def to_dataframe(self) -> pd.DataFrame:
        return refit_frame(self)


def refit_frame(metrics: RefitRunMetrics) -> pd.DataFrame:
    return frame(({"iter": i, "time_ms": ms} for i, ms in metrics.iterations), columns=["iter", "time_ms"])


def _tolerance(printed: str) -> float:
    """Half a unit in the last printed digit (a value printed as 45.23 may be anything in [45.225, 45.235])."""
    mantissa = printed.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(printed.lower().split("e")[1]) if "e" in printed.lower() else 0
    try:
        return 0.5 * 10.0 ** (exponent - decimals)
    except OverflowError:  # a printed "1e999": no tolerance makes it agree with a real time
        return math.inf


def _count(match: re.Match[str] | None, group: str) -> int | None:
    """A REFIT_STATS count; the payload prints -1 when it could not count, which is not a count."""
    if match is None:
        return None
    value = int(match.group(group))
    return value if value >= 0 else None


def parse_refit_run(
    run_dir: Path | str, warmup: int = 0, stall_factor: float = STALL_FACTOR, workers: int = 1
) -> RefitRunMetrics:
    """Parse one refit run folder; ``warmup=0`` because the payload already leaves its warm-up out."""
    layout = load_layout(run_dir)
    run = scan_run(layout, lambda rank: RANK0_PLAN if rank == 0 else OTHER_RANK_PLAN, JOB_PLAN, workers)
    problems: list[str] = []
    if not layout.rank_logs and not layout.job_logs:
        problems.append("no_logs")
    if layout.config_status != "ok":
        problems.append("missing_config" if layout.config_status == "missing" else "invalid_config")

    rank0 = run.ranks.get(0)
    lines: list[LogLine] = list(rank0.lines(REFIT.name)) if rank0 else []
    if not lines:
        lines = run.labelled(REFIT.name, (None, 0))
        if lines:
            problems.append("refit_from_job_logs")

    by_iter: dict[int, float] = {}
    time_errors: list[str] = []
    printed: dict[str, float] = {}
    printed_text: dict[str, str] = {}
    bandwidth = stats_match = verify = result = None
    for line in lines:
        if not line.terminated:
            continue
        text = line.text
        for m in _ITER_RE.finditer(text):
            i = int(m.group("iter"))
            try:
                ms = float(m.group("ms")) if m.group("ms").isascii() and "_" not in m.group("ms") else math.nan
            except ValueError:
                ms = math.nan
            if i in by_iter:
                problems.append("duplicate_iterations")
            why = iteration_time_problem(ms)
            if why is not None:  # a damaged time never enters a statistic; the run is invalid
                time_errors.append(f"REFIT_ITER iter={i} time_ms={m.group('ms')} is {why}")
                by_iter.pop(i, None)
                continue
            by_iter[i] = ms
        for m in _SUMMARY_RE.finditer(text):
            printed[m.group("which").lower()] = float(m.group("ms"))
            printed_text[m.group("which").lower()] = m.group("ms")
        if m := _BANDWIDTH_RE.search(text):
            bandwidth = float(m.group("gbps"))
            if not (math.isfinite(bandwidth) and bandwidth >= 0.0):
                bandwidth = None
        stats_match = _STATS_RE.search(text) or stats_match
        if m := _VERIFY_RE.search(text):
            verify = RefitVerify(
                m.group("status"), int(m.group("params")), int(m.group("mismatched")), (m.group("detail") or "").strip()
            )
        if m := _RESULT_RE.search(text):
            try:
                decoded = json.loads(m.group("json"))
            except ValueError:
                problems.append("bad_result_json")
            else:
                result = decoded if isinstance(decoded, dict) else None

    if time_errors:
        problems.append("bad_iteration_time")
    iterations = tuple(sorted(by_iter.items()))
    time_ms = steady_state([ms for _, ms in iterations], warmup, stall_factor)
    if time_ms.n == 0:
        problems.append("no_iterations")
    if warmup == 0 and time_ms.n:
        computed = {"mean": time_ms.mean, "min": time_ms.min, "max": time_ms.max, "median": time_ms.median}
        for which, value in printed.items():
            reference = computed[which]
            if reference is None or not math.isclose(
                value, reference, rel_tol=1e-9, abs_tol=_tolerance(printed_text[which]) * (1 + 1e-9)
            ):
                problems.append("summary_mismatch")
    if verify is not None and verify.status == "skipped":
        problems.append("verify_skipped")
    if result is None:
        problems.append("no_result")

    files = [*run.ranks.items(), *((None, j) for j in run.jobs)]
    dispatcher = signals.DispatcherReport()
    validity = signals.validity_signals(files, dispatcher, world_size=layout.world_size)
    findings = signals.failure_findings(
        [(run.source(s), r, s) for r, s in files], extra_markers=(REFIT.name, REFIT_ERROR.name)
    )
    if verify is not None and verify.status == "fail":
        detail = f"REFIT_VERIFY status=fail params={verify.params} mismatched={verify.mismatched} {verify.detail}"
        findings.append(signals.FailureFinding("verify_failed", detail.strip(), "rank 0", 0))
    failure = signals.failure_report(findings, complete=result is not None)
    if failure.status == "failed":
        problems.append("failed")
    if layout.missing_ranks:
        problems.append("missing_rank_log")
    if any(s.truncated for s in (*run.ranks.values(), *run.jobs)):
        problems.append("truncated")
    if any(s.status == "unreadable" for s in (*run.ranks.values(), *run.jobs)):
        problems.append("unreadable_log")

    promote = ("missing_rank_log", "no_iterations") if 0 in layout.missing_ranks else None
    status, problems_out = signals.order_problems(problems, STATUS_ORDER, promote)
    return RefitRunMetrics(
        run_dir=layout.run_dir,
        status=status,
        problems=problems_out,
        config=layout.config,
        world_size=layout.world_size,
        iterations=iterations,
        time_ms=time_ms,
        printed=printed,
        bandwidth_gbps=bandwidth,
        bytes_remote=_count(stats_match, "remote"),
        bytes_local=_count(stats_match, "local"),
        send_ops=_count(stats_match, "send"),
        recv_ops=_count(stats_match, "recv"),
        verify=verify,
        result=result,
        validity=validity,
        failure=failure,
        time_errors=tuple(time_errors),
    )
