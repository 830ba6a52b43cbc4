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

What the report trusts, and what it cross-checks (a damaged or mixed-up results folder gives no number):

- the mapping and the model come from ``REFIT_CONFIG`` (what ran), not from ``mbridge_config.json`` as it is now;
- the run id and the config digest printed in ``REFIT_CONFIG`` and by every rank (``REFIT_RANK``) must match the
  run folder's config: logs copied from another run, or a config edited after the run, make it invalid
  (``foreign_logs`` / ``config_changed``);
- verification is recomputed from the ``REFIT_TENSOR`` lines (one per checked tensor); the ``REFIT_VERIFY`` summary
  and ``REFIT_RESULT``'s copy must agree with them, else ``verify_inconsistent`` (a "pass" beside mismatched tensors
  is a failure). Logs of a payload that predates the per-tensor lines (no config digest) are checked on their counts;
- a ``REFIT_`` line with bytes that are not UTF-8 is never read as what it seems to say: in an iteration line it is
  a damaged time (``bad_iteration_time``), elsewhere a ``damaged_line``; fewer timed iterations than the run was
  configured for is ``missing_iterations``;
- JSON nested deeper than :data:`.safejson.MAX_DEPTH` (or otherwise unreadable) is ``bad_result_json`` for that run.

Values are recomputed from the ``REFIT_ITER`` lines and checked against the printed summary (to the printed
precision): a disagreement means lines were lost or the summary covers other iterations, and is reported as
``summary_mismatch`` rather than trusted. Lines cut by the end of the file are not used.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import safejson, signals
from .frames import frame
from .layout import CONFIG_NAME, load_layout
from .scan import LogLine, Marker, Routed, fold_job_logs, in_scan_order, scan_run
from .stats import SAMPLE_CAP, STALL_FACTOR, Stats, StreamedSeries, iteration_time_problem, steady_state

if TYPE_CHECKING:
    import pandas as pd

# "time_ms=" also finds an iteration line whose "REFIT_ITER" was damaged, so it is counted, not lost
REFIT = Marker("refit", (b"REFIT_", b"refit time:", b"Effective bandwidth:", b"time_ms="))
REFIT_ERROR = Marker("refit_error", (b"REFIT_ERROR",))
REFIT_RANK = Marker("refit_rank", (b"REFIT_RANK",))

_FLOAT = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,18})?"
# Counts are at most 18 digits (int64): a longer run of digits is damage (and int() refuses more than 4300 digits).
_COUNT = r"\d{1,18}"
# Any time_ms token is read (nan/inf included): one that is not a real time makes the run invalid, not unseen.
# a REFIT_ITER line and nothing else: no failure line (signals.classify_line), so not kept for the failure search
_PLAIN_ITER_RE = re.compile(r"REFIT_ITER iter=\d{1,18} time_ms=[0-9.]{1,40}")
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
_CONFIG_RE = re.compile(r"REFIT_CONFIG\s+(?P<json>\{.*\})\s*$")
_RANK_RE = re.compile(r"REFIT_RANK\s+rank=(?P<rank>\d{1,9})\s+run_id=(?P<run_id>\S+)\s+config_digest=(?P<digest>\S+)")
# "profile": true runs: medians (ms, rank 0) of the phases of a refit (payload/refit/phases.py)
_PHASES_RE = re.compile(r"REFIT_PHASES((?:\s+[a-z]+_ms=[0-9.]+)+)\s*$")
# executor "replay" (payload/refit/replay.py): the replayed op counts (summed over ranks), or why it fell back
_EXECUTOR_RE = re.compile(r"REFIT_EXECUTOR\s+(?:name=(?P<name>[a-z]+)\s+ops_send=(?P<sends>\d{1,12})\s+"
                          r"ops_recv=(?P<recvs>\d{1,12})|fallback\s+reason=(?P<reason>\S+))\s*$")
_TENSOR_RE = re.compile(r"REFIT_TENSOR\s+result=(?P<result>ok|mismatch)\s+name=(?P<name>\S+)\s*$")
_DAMAGE = ("\ufffd", "\x00")  # what undecodable bytes (or NULs) leave in a decoded line

STATUS_ORDER = (
    "no_logs",
    "failed",
    "bad_iteration_time",
    "no_iterations",
    "missing_rank_log",
    "truncated",
    "no_result",
    "foreign_logs",
    "config_changed",
    "verify_inconsistent",
    "damaged_line",
    "missing_iterations",
    "summary_mismatch",
    "bad_result_json",
    "unreadable_log",
    "missing_config",
    "invalid_config",
)
REFIT_FAILURE_MARKERS = (*signals.FAILURE_MARKERS, signals.EFA, signals.SOCKET)
JOB_PLAN = signals.job_log_markers((*REFIT_FAILURE_MARKERS, REFIT))
# On rank 0 the iteration lines (10^6 in a long run) are read as the scan finds them (scan.Marker.fold, see
# _RefitReader) and never all held; its other REFIT_ lines (a few) come after them, as before.
RANK0_ITER = Marker("refit_iter", (b"time_ms=",))
RANK0_REFIT = dataclasses.replace(REFIT, needles=REFIT.needles[:3], keep=re.compile(r"^(?!.*time_ms=)"))
RANK0_PLAN = (*REFIT_FAILURE_MARKERS, RANK0_REFIT, RANK0_ITER)
OTHER_RANK_PLAN = (*REFIT_FAILURE_MARKERS, REFIT_ERROR, REFIT_RANK)


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
    recorded: Mapping[str, Any] | None = None  # the REFIT_CONFIG header: what ran
    invalid_reasons: tuple[str, ...] = ()  # why no number of this run may be used (foreign logs, edits, damage)
    # REFIT_PHASES (config "profile": true): phase name (submit, run, rest, local, pack, comm, unpack) -> median ms
    phases: Mapping[str, float] | None = None
    # REFIT_EXECUTOR (config "executor": "replay"): {"name": "replay", "ops_send": n, "ops_recv": n}, or
    # {"name": "megatron", "fallback": reason} when the replay fell back to swap_model_weights; None: no such line
    executor: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ran_config(self) -> Mapping[str, Any]:
        """The config the payload ran with (REFIT_CONFIG), else the run folder's mbridge_config.json."""
        if "foreign_logs" in self.problems:  # another run's record: this folder is what its config file says
            return self.config
        ran = self.recorded.get("config") if isinstance(self.recorded, Mapping) else None
        if isinstance(ran, Mapping) and all(isinstance(ran.get(k), Mapping) for k in ("model", "src", "dst")):
            return ran
        return self.config

    @property
    def idle_ranks(self) -> str | None:
        """Ranks that held neither side ("6-7", "none"), from what ran: REFIT_CONFIG's idle_ranks, else its layouts
        and world size (the rest of a non-collocated world idles); None without a REFIT_CONFIG to read it from."""
        rec = self.recorded if isinstance(self.recorded, Mapping) else {}
        if isinstance(rec.get("idle_ranks"), str):
            return rec["idle_ranks"]
        layout, world = rec.get("layout"), rec.get("world_size")
        try:
            used = max(int(layout[s]["first_rank"]) + int(layout[s]["world"]) for s in ("src", "dst"))
        except (TypeError, KeyError, ValueError):
            return None
        if not isinstance(world, int) or isinstance(world, bool) or world < used:
            return None
        return "none" if world == used else str(used) if world == used + 1 else f"{used}-{world - 1}"

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
            "invalid_reasons": "; ".join(self.invalid_reasons) or None,
            # only a log of more than SAMPLE_CAP timed refits: which numbers are of a sample (and the CSV's rows)
            **({"sample": t.sample_note + "; mbridge_refit_iterations.csv holds the sample's rows"}
               if t.sampled else {}),
        }

    def to_dataframe(self) -> pd.DataFrame:
        return refit_frame(self)


def refit_frame(metrics: RefitRunMetrics) -> pd.DataFrame:
    """One row per timed refit; for a log of more than SAMPLE_CAP of them the rows of the 1-in-k sample the order
    statistics came from, each row saying so (``sample_1_in``: k)."""
    stride = metrics.time_ms.sample_stride
    if stride > 1:
        return frame(({"iter": i, "time_ms": ms, "sample_1_in": stride} for i, ms in metrics.iterations),
                     columns=["iter", "time_ms", "sample_1_in"])
    return frame(({"iter": i, "time_ms": ms} for i, ms in metrics.iterations), columns=["iter", "time_ms"])


class _RefitReader:
    """What rank 0's ``REFIT_`` lines say, read one line at a time: handed the iteration lines by the scan as it finds
    them (scan.Marker.fold), then the run's other REFIT_ lines.

    The timed iterations are held by iteration number, exactly as logged, up to :data:`.stats.SAMPLE_CAP`; past it they
    stream (:class:`.stats.StreamedSeries`): their count, mean, min and max stay exact and the stdev is of every one
    (Welford's), the median, p10, p90, the stalls and the iterations kept for the CSV and the plot come from a
    1-in-2^k sample, and memory no longer grows with the log. Streamed iterations must come in order: one logged
    again or out of order is then a bad iteration line (the run gets no number), never silently placed."""

    def __init__(self, warmup: int = 0, keep_for_findings: bool = True, cap: int | None = None) -> None:
        self.warmup, self.cap, self.keep_for_findings = warmup, cap or SAMPLE_CAP, keep_for_findings
        self.by_iter: dict[int, float] | None = {}
        self.last = -1  # the highest iteration held so far
        self.series: StreamedSeries | None = None
        self.warm_rows: list[tuple[int, float]] = []  # streamed: the warm-up iterations (left out of the statistics)
        self.lines = 0
        self.problems: list[str] = []
        self.time_errors = signals.Capped()  # the first 20 messages and a count: 10^6 bad lines hold no 10^6 strings
        self.damaged = signals.Capped()
        self.printed: dict[str, float] = {}
        self.printed_text: dict[str, str] = {}
        self.tensors: dict[str, str] = {}
        self.kept: list[LogLine] = []  # for the failure search: every line but the plain REFIT_ITER ones
        self.bandwidth: float | None = None
        self.counts: tuple[int | None, ...] = (None, None, None, None)
        self.verify: RefitVerify | None = None
        self.result: dict[str, Any] | None = None
        self.recorded: dict[str, Any] | None = None
        self.phases: dict[str, float] | None = None
        self.executor: dict[str, Any] | None = None

    def add(self, line: LogLine) -> None:
        self.lines += 1
        if self.keep_for_findings and _for_findings(line):
            self.kept.append(line)
        if not line.terminated:
            return
        text = line.text
        if any(mark in text for mark in _DAMAGE):  # never read a damaged line as what it seems to say
            shown = text.replace("\ufffd", "?").replace("\x00", "?")[:120]
            if "ITER" in text or "time_ms=" in text:
                self.time_errors.append(f"iteration line with damaged bytes: {shown!r}")
            else:
                self.damaged.append(f"line with damaged bytes: {shown!r}")
            return
        for m in _ITER_RE.finditer(text):
            try:
                ms = float(m.group("ms")) if m.group("ms").isascii() and "_" not in m.group("ms") else math.nan
            except ValueError:
                ms = math.nan
            self._timed(int(m.group("iter")), ms, m.group("ms"))
        if "time_ms=" in text and not _ITER_RE.search(text):
            self.time_errors.append(f"iteration line that does not read as REFIT_ITER: {text[:120]!r}")
        for m in _SUMMARY_RE.finditer(text):
            self.printed[m.group("which").lower()] = float(m.group("ms"))
            self.printed_text[m.group("which").lower()] = m.group("ms")
        if m := _BANDWIDTH_RE.search(text):
            bandwidth = float(m.group("gbps"))
            self.bandwidth = bandwidth if math.isfinite(bandwidth) and bandwidth >= 0.0 else None
        if m := _STATS_RE.search(text):
            self.counts = tuple(_count(m, group) for group in ("remote", "local", "send", "recv"))
        if m := _PHASES_RE.search(text):
            self.phases = {k[:-3]: float(v) for k, _, v in (kv.partition("=") for kv in m.group(1).split())}
        if m := _EXECUTOR_RE.search(text):
            self.executor = ({"name": "megatron", "fallback": m.group("reason")} if m.group("reason") else
                             {"name": m.group("name"), "ops_send": int(m.group("sends")),
                              "ops_recv": int(m.group("recvs"))})
        if m := _VERIFY_RE.search(text):
            self.verify = RefitVerify(
                m.group("status"), int(m.group("params")), int(m.group("mismatched")), (m.group("detail") or "").strip()
            )
        # a tensor reported twice counts as its worst result
        if (m := _TENSOR_RE.search(text)) and self.tensors.get(m.group("name")) != "mismatch":
            self.tensors[m.group("name")] = m.group("result")
        for regex, what in ((_RESULT_RE, "REFIT_RESULT"), (_CONFIG_RE, "REFIT_CONFIG")):
            if m := regex.search(text):
                try:
                    decoded = safejson.loads(m.group("json"))
                except ValueError as exc:
                    self.problems.append("bad_result_json")
                    self.damaged.append(f"{what} unreadable: {exc}")
                    continue
                if what == "REFIT_RESULT":
                    self.result = decoded if isinstance(decoded, dict) else None
                else:
                    self.recorded = decoded if isinstance(decoded, dict) else None

    def _timed(self, i: int, ms: float, raw: str) -> None:
        by_iter = self.by_iter
        if by_iter is not None and i in by_iter and "duplicate_iterations" not in self.problems:
            self.problems.append("duplicate_iterations")
        why = iteration_time_problem(ms)
        if why is not None:  # a damaged time never enters a statistic; the run is invalid
            self.time_errors.append(f"REFIT_ITER iter={i} time_ms={raw} is {why}")
            if by_iter is not None:
                by_iter.pop(i, None)
            return
        if by_iter is not None:
            by_iter[i] = ms
            if len(by_iter) > self.cap:
                self._start_streaming()
            return
        if i <= self.last:
            self.time_errors.append(f"REFIT_ITER iter={i} comes after iter={self.last}: past {self.cap:,} timed "
                                    f"refits a log is read in order (in bounded memory), and an iteration logged "
                                    f"again or out of order cannot be placed")
            return
        self._stream(i, ms)

    def _start_streaming(self) -> None:
        assert self.by_iter is not None
        held, self.by_iter = sorted(self.by_iter.items()), None
        self.series = StreamedSeries("dq", self.cap)
        for i, ms in held:
            self._stream(i, ms)

    def _stream(self, i: int, ms: float) -> None:
        assert self.series is not None
        self.last = i
        if len(self.warm_rows) < self.warmup:
            self.warm_rows.append((i, ms))
        else:
            self.series.add(ms, i)

    def finish(self, stall_factor: float) -> tuple[tuple[tuple[int, float], ...], Stats]:
        """(the timed iterations kept, in order: all of them up to the cap, else the warm-up and the sample; their
        statistics after the warm-up)."""
        if self.series is None:
            assert self.by_iter is not None
            iterations = tuple(sorted(self.by_iter.items()))
            return iterations, steady_state([ms for _, ms in iterations], self.warmup, stall_factor)
        times, numbers = self.series.sample.columns
        stats = self.series.stats(len(self.warm_rows), 0, stall_factor)
        return (*self.warm_rows, *zip(numbers, times, strict=True)), stats

    def for_findings(self) -> list[LogLine]:
        """The lines kept for the failure search, in the order the scan of one REFIT marker gives them (by needle,
        then by place in the file)."""
        return in_scan_order(REFIT, self.kept)


def _for_findings(line: LogLine) -> bool:
    """Whether the failure search needs a REFIT line: all but the whole plain ``REFIT_ITER`` ones (no failure line)."""
    return not (line.terminated and _PLAIN_ITER_RE.fullmatch(line.text))


def _job_plan(reader: _RefitReader | None) -> tuple[Marker, ...]:
    """JOB_PLAN whose REFIT lines are folded (scan.Routed): those of rank 0 or of no rank into ``reader`` (None: rank
    0's own log is read instead), and only the lines the failure search needs kept; a job log of 10^6 iteration lines
    holds none of them."""
    routed = functools.partial(Routed, reader, (None, 0), _for_findings)
    return tuple(dataclasses.replace(m, fold=routed) if m.name == REFIT.name else m for m in JOB_PLAN)


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
    rank0_plan = (*RANK0_PLAN[:-1], dataclasses.replace(RANK0_ITER, fold=functools.partial(_RefitReader, warmup)))
    # the job logs' REFIT lines are read during their scan when there is no rank 0 log to read them from
    job_reader = None if 0 in layout.rank_logs else _RefitReader(warmup, keep_for_findings=False)
    run = scan_run(layout, lambda rank: rank0_plan if rank == 0 else OTHER_RANK_PLAN, _job_plan(job_reader), workers)
    problems: list[str] = []
    if not layout.rank_logs and not layout.job_logs:
        problems.append("no_logs")
    if layout.config_status != "ok":
        problems.append("missing_config" if layout.config_status == "missing" else "invalid_config")

    rank0 = run.ranks.get(0)
    # rank 0's iteration lines were read during the scan; its other REFIT_ lines are taken from the scan and let go as
    # they are read; the failure search below gets back every line but the plain REFIT_ITER ones
    reader = rank0.folded.get(RANK0_ITER.name) if rank0 is not None else None
    lines: list[LogLine | None] = list(rank0.take(REFIT.name)) if rank0 else []
    from_rank0 = isinstance(reader, _RefitReader) and bool(lines or reader.lines)
    if not from_rank0:
        reader = (job_reader if job_reader is not None
                  else fold_job_logs(layout, REFIT, _RefitReader(warmup, keep_for_findings=False), (None, 0)))
        lines = []
        if reader.lines:
            problems.append("refit_from_job_logs")
    assert isinstance(reader, _RefitReader)
    for index, line in enumerate(lines):
        lines[index] = None
        assert line is not None
        reader.add(line)
    problems += reader.problems
    time_errors, damaged, printed, printed_text = (reader.time_errors, reader.damaged, reader.printed,
                                                   reader.printed_text)
    bandwidth, verify, result, recorded = reader.bandwidth, reader.verify, reader.result, reader.recorded

    if time_errors:
        problems.append("bad_iteration_time")
    iterations, time_ms = reader.finish(stall_factor)
    n_timed = time_ms.n + time_ms.n_warmup
    if time_ms.n == 0:
        problems.append("no_iterations")
    if warmup == 0 and time_ms.n:
        computed = {"mean": time_ms.mean, "min": time_ms.min, "max": time_ms.max, "median": time_ms.median}
        for which, value in printed.items():
            if which == "median" and time_ms.sampled:  # a sample's median is no check of the printed one
                continue
            reference = computed[which]
            if reference is None or not math.isclose(
                value, reference, rel_tol=1e-9, abs_tol=_tolerance(printed_text[which]) * (1 + 1e-9)
            ):
                problems.append("summary_mismatch")
    invalid: list[str] = []
    verify, why_verify = _recompute_verify(verify, reader.tensors, result, recorded)
    if why_verify:
        problems.append("verify_inconsistent")
        invalid += why_verify
    # a run that failed before it printed REFIT_CONFIG has nothing to check; numbers without one do
    has_numbers = bool(n_timed or time_errors or verify is not None or result is not None or reader.tensors)
    why_foreign, why_changed = _provenance(layout, recorded if recorded is not None or has_numbers else {}, run)
    if why_foreign:
        problems.append("foreign_logs")
        invalid += why_foreign
    if why_changed:
        problems.append("config_changed")
        invalid += why_changed
    if damaged:
        problems.append("damaged_line")
        invalid += damaged.done()
    configured = (recorded or {}).get("config", {}) if isinstance((recorded or {}).get("config"), dict) else {}
    wanted = configured.get("iterations")
    if (isinstance(wanted, int) and not isinstance(wanted, bool) and verify is not None and verify.status != "fail"
            and n_timed + time_errors.total < wanted):
        problems.append("missing_iterations")
        invalid.append(f"{n_timed} timed iterations in the log, the run was configured for {wanted}")
    if verify is not None and verify.status == "skipped":
        problems.append("verify_skipped")
    if result is None:
        problems.append("no_result")

    if rank0 is not None and from_rank0:
        rank0.give_back(REFIT.name, reader.for_findings())
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
        bytes_remote=reader.counts[0],
        bytes_local=reader.counts[1],
        send_ops=reader.counts[2],
        recv_ops=reader.counts[3],
        verify=verify,
        result=result,
        validity=validity,
        failure=failure,
        time_errors=time_errors.done(),
        recorded=recorded,
        invalid_reasons=tuple(invalid),
        phases=reader.phases,
        executor=reader.executor,
    )


def _recompute_verify(
    printed: RefitVerify | None, tensors: Mapping[str, str], result: Mapping[str, Any] | None,
    recorded: Mapping[str, Any] | None,
) -> tuple[RefitVerify | None, list[str]]:
    """The verdict from the per-tensor results (the summary line and REFIT_RESULT's copy only cross-check it);
    returns it with the disagreements found (each makes the run invalid)."""
    why: list[str] = []
    if tensors:
        bad = sorted(n for n, r in tensors.items() if r == "mismatch")
        params = sum(1 for n in tensors if not n.startswith("src:"))
        failed = bool(bad) or (printed is not None and printed.status == "fail")
        detail = (printed.detail if printed is not None else "") + (f";first={bad[0]}" if bad and (
            printed is None or "first=" not in printed.detail) else "")
        verify = RefitVerify("fail" if failed else "pass", params, len(bad), detail)
        if printed is None:
            why.append(f"per-tensor results ({params} tensors) without a REFIT_VERIFY summary")
        elif (printed.status, printed.params, printed.mismatched) != (verify.status, params, len(bad)):
            why.append(f"REFIT_VERIFY says status={printed.status} params={printed.params} mismatched="
                       f"{printed.mismatched}, the per-tensor results say {len(bad)} of {params} tensors differ")
    else:
        verify = printed
        new_payload = isinstance(recorded, Mapping) and recorded.get("config_digest") is not None
        if printed is not None and printed.status != "skipped":
            if printed.status == "pass" and (printed.mismatched or not printed.params):
                verify = RefitVerify("fail", printed.params, printed.mismatched, printed.detail)
                why.append(f"REFIT_VERIFY says pass with {printed.mismatched} mismatched of {printed.params} tensors")
            if new_payload:
                why.append("no per-tensor results (REFIT_TENSOR) beside the REFIT_VERIFY summary")
    copy = result.get("verify") if isinstance(result, Mapping) else None
    if printed is not None and isinstance(copy, Mapping):
        theirs = (copy.get("status"), copy.get("params"), copy.get("mismatched"))
        if theirs != (printed.status, printed.params, printed.mismatched):
            why.append(f"REFIT_RESULT's verify {theirs} disagrees with REFIT_VERIFY")
    if why and verify is not None and verify.status == "pass":
        verify = RefitVerify("fail", verify.params, verify.mismatched, verify.detail)
    return verify, why


def config_file_digest(run_dir: Path) -> str | None:
    """``sha256:<hex>`` of the run folder's mbridge_config.json as it is now (the payload prints the same of the
    file it read)."""
    try:
        from ..safe_read import MAX_JSON_BYTES, InputFileError, read_bytes

        data = read_bytes(run_dir / CONFIG_NAME, MAX_JSON_BYTES, "the run's config")
        return "sha256:" + hashlib.sha256(data).hexdigest()
    except (OSError, InputFileError):
        return None


# What the mapping and the work are made of: a config edited in these after the run relabels it.
_WORK_KEYS = ("model", "src", "dst", "mode", "transport", "dtype", "coalesce_mib", "executor", "coalesce_schedule",
              "coalesce_edge_mib", "iterations", "warmup", "device")


def _differs(written: Any, ran: Any) -> bool:
    """Whether a value of the config file differs from what the payload resolved (the payload fills in defaults the
    file leaves out, so only what the file says is compared)."""
    if isinstance(written, Mapping) and isinstance(ran, Mapping):
        return any(k not in ran or _differs(v, ran[k]) for k, v in written.items())
    return written != ran


def _provenance(layout: Any, recorded: Mapping[str, Any] | None, run: Any) -> tuple[list[str], list[str]]:
    """(reasons the logs come from another run, reasons the config changed after the run)."""
    foreign: list[str] = []
    changed: list[str] = []
    config = layout.config
    run_id = config.get("run_id") if isinstance(config.get("run_id"), str) else None
    digest_now = config_file_digest(layout.run_dir)
    rec = recorded if isinstance(recorded, Mapping) else {}
    if run_id is not None and (recorded is None or rec):
        logged = rec.get("run_id")
        if recorded is None:
            foreign.append(f"{CONFIG_NAME} names run {run_id}, but rank 0's log has no REFIT_CONFIG line")
        elif logged != run_id:
            foreign.append(f"rank 0's log is from run {logged or '(no run id)'}, this folder is run {run_id}: "
                           "the logs come from another run")
    logged_digest = rec.get("config_digest")
    if isinstance(logged_digest, str):
        if logged_digest != digest_now:
            changed.append(f"{CONFIG_NAME} is not the file the run read (digest {logged_digest[:19]} at run time, "
                           f"{(digest_now or 'unreadable')[:19]} now): edited after the run")
    elif isinstance(rec.get("config"), Mapping) and config:  # an older payload: compare what it recorded
        ran = rec["config"]
        diff = [k for k in _WORK_KEYS if k in ran and k in config and _differs(config[k], ran[k])]
        if diff:
            changed.append(f"{CONFIG_NAME} differs from the config the run recorded in {', '.join(diff)}: edited "
                           "after the run (the report uses what ran)")
    for rank, scan in run.ranks.items():
        for line in scan.lines(REFIT_RANK.name):
            m = _RANK_RE.search(line.text)
            if m is None or not line.terminated:
                continue
            if run_id is not None and m.group("run_id") != run_id:
                foreign.append(f"rank {rank}'s log is from run {m.group('run_id')}, this folder is run {run_id}")
            elif m.group("digest") not in ("none", digest_now):
                changed.append(f"rank {rank} read another config (digest {m.group('digest')[:19]})")
    return foreign, changed
