"""Per-test reports (CSV, summary, plot) and DSE metrics for both workloads, from the metrics/ parsers."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from cloudai.core import METRIC_ERROR, JobStatusResult, MetricValue, ReportGenerationStrategy, TestRun

from ..atomic import Staged, write_together
from ..metrics import RefitRunMetrics, TrainingRunMetrics, load_layout, parse_run, refit_frame
from ..metrics.golden import GOLDEN_FILE, GoldenComparison, compare_golden, golden_values_chunks
from ..metrics.training import iterations_csv_chunks, run_title
from ..plots import Panel, series_plot, time_panel
from ..redact import redact_report
from .training_report import REPORT_FILE as TRAINING_REPORT_FILE
from .training_report import training_report_chunks

Metrics = TrainingRunMetrics | RefitRunMetrics


def run_status(output_path: Path) -> JobStatusResult:
    """Success only when the logs show a complete, valid run; otherwise the parser's reason and the failure kind."""
    m = parse_run(output_path)
    if m.ok:
        return JobStatusResult(is_successful=True)
    first = m.failure.first
    reason = m.status
    if first is not None:
        rank = f" on rank {first.rank}" if first.rank is not None else ""
        reason = f"{m.failure.reason()['failure_class']}{rank}: {first.detail[:200]}"
    elif m.time_errors:
        reason = f"damaged log, no time is used: {'; '.join(m.time_errors)[:200]}"
    elif getattr(m, "inconsistencies", ()):
        reason = f"inconsistent log, no time is used: {'; '.join(m.inconsistencies)[:300]}"
    elif getattr(m, "invalid_reasons", ()):
        reason = f"invalid, no time is used: {'; '.join(m.invalid_reasons)[:200]}"
    details = ", ".join(m.problems) or m.status
    verify = getattr(m, "verify", None)
    if verify is not None and verify.status == "fail":
        reason = f"refit verification failed ({verify.mismatched} of {verify.params} parameters differ)"
    return JobStatusResult(is_successful=False, error_message=f"{reason} [{details}] in {output_path}")


def golden_comparison(tr: TestRun, m: TrainingRunMetrics | None = None) -> GoldenComparison | None:
    """The run against the golden-values file its test names (None when it names none)."""
    args = getattr(tr.test, "cmd_args", None)
    path = getattr(args, "golden_values", None)
    if not path:
        return None
    metrics = m if m is not None else parse_run(tr.output_path)
    if not isinstance(metrics, TrainingRunMetrics):
        return None
    return compare_golden(metrics, Path(path).expanduser(), args.golden_thresholds.thresholds())


def golden_status(tr: TestRun) -> JobStatusResult:
    result = golden_comparison(tr)
    if result is None or result.passed:
        return JobStatusResult(is_successful=True)
    return JobStatusResult(is_successful=False, error_message=f"{result.reason} in {tr.output_path}")


class MBridgeReport(ReportGenerationStrategy):
    workload: ClassVar[str]
    metric_fns: ClassVar[dict[str, Callable[[Any], float | None]]]
    _parsed: Metrics | None = None

    def parsed(self) -> Metrics:
        if self._parsed is None:
            self._parsed = parse_run(self.test_run.output_path)
        return self._parsed

    def can_handle_directory(self) -> bool:
        path = self.test_run.output_path
        linked = next((p for p in (path, path.parent, path.parent.parent) if p.is_symlink()), None)
        if linked is not None:  # the run's report files would be written where the link points, outside the results
            logging.warning(f"{path}: not reported: {linked} is a symbolic link (a report writes into the run's "
                            "folder, which would then be outside the results folder)")
            return False
        return (path / "mbridge_config.json").is_file() and load_layout(path).workload == self.workload

    def get_metric(self, metric: str) -> MetricValue:
        fn = self.metric_fns.get(metric)
        m = self.parsed()
        if fn is None or not m.ok:
            return METRIC_ERROR
        value = fn(m)
        return METRIC_ERROR if value is None else float(value)

    def summary_file(self, m: Metrics, **extra: Any) -> tuple[Path, str]:
        """(path, text) of the run's mbridge_summary.json."""
        summary = m.summary()
        summary["metrics"] = {name: self.get_metric(name) for name in self.metrics}
        summary.update(extra)
        path = self.test_run.output_path / "mbridge_summary.json"
        return path, redact_report(json.dumps(summary, indent=2, default=str, sort_keys=True) + "\n")


# A sweep of more runs than this gets no per-run PNG: at 1,000 runs the plots took 452 s of a 706 s report. The
# numbers stay in each run's CSV and in the scenario page's tables; the summary says why no plot was drawn.
PER_RUN_PLOTS = 32


_SWEEP_RUNS: dict[tuple[str, int, int], int] = {}


def _sweep_runs(parent: Path) -> int | None:
    """How many numbered run folders ``parent`` holds (None: it cannot be listed). Counted once per folder state
    (its inode and modification time, which a new or removed entry changes): every run of a sweep asks, and listing
    the folder per run made a 1,000-run report quadratic."""
    try:
        st = parent.stat()
        key = (str(parent), st.st_ino, st.st_mtime_ns)
        if key not in _SWEEP_RUNS:
            if len(_SWEEP_RUNS) >= 1024:
                _SWEEP_RUNS.clear()
            _SWEEP_RUNS[key] = sum(1 for d in parent.iterdir() if d.name.isdecimal())
        return _SWEEP_RUNS[key]
    except OSError:
        return None


def plot_skipped(tr: TestRun) -> str | None:
    """Why this run gets no per-run PNG (None: it gets one): its sweep has more than PER_RUN_PLOTS runs."""
    if not tr.step:
        return None
    runs = _sweep_runs(tr.output_path.parent)
    if runs is None:
        return None
    if runs <= PER_RUN_PLOTS:
        return None
    return (f"not drawn: {runs} runs in this sweep (more than {PER_RUN_PLOTS}); the values are in this run's CSV and "
            "in the scenario report's tables")


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


class MBridgeTrainingReport(MBridgeReport):
    """iteration-time: steady-state mean seconds per iteration; iteration-time-no-gc: the same without the iterations
    that carry Bridge's manual garbage collection (the A/B page's measure; equal to iteration-time where no collection
    ran); tflops-per-gpu: mean model TFLOP/s per GPU; tokens-per-second: mean gbs*seq_length/iteration time.
    ``default`` is iteration-time (lower is better)."""

    workload = "training"
    metrics: ClassVar[list[str]] = ["default", "iteration-time", "iteration-time-no-gc", "tflops-per-gpu",
                                    "tokens-per-second"]
    metric_fns: ClassVar[dict[str, Callable[[Any], float | None]]] = {
        "default": lambda m: _s(m.iteration_time_ms.mean),
        "iteration-time": lambda m: _s(m.iteration_time_ms.mean),
        # A short DSE point (14 iterations, GC every 5) has 2 of its 10 steady steps 0.7-0.9 s slower from gc.collect()
        # alone (4 x H200, benchmarks/results/bridge_ab_4gpu, host 7): +25 % on the mean, the same in every arm.
        "iteration-time-no-gc": lambda m: _s(m.iteration_time_ms_no_gc.mean if m.gc_iterations
                                             else m.iteration_time_ms.mean),
        "tflops-per-gpu": lambda m: m.tflops_per_gpu.mean,
        "tokens-per-second": lambda m: m.tokens_per_s.mean,
    }

    def generate_report(self) -> None:
        m = self.parsed()
        out = self.test_run.output_path
        # the CSV streamed into a temporary file beside it (a 10^6-iteration run's ~150 MB of text never held),
        # placed with the others or removed
        streamed = [Staged(out / "mbridge_iterations.csv")]
        try:
            for chunk in iterations_csv_chunks(m):
                streamed[0].write(chunk)
            if m.iterations:  # the next golden file: this run's values in Megatron-Bridge's format, streamed too
                streamed.append(Staged(out / GOLDEN_FILE))
                for chunk in golden_values_chunks(m):
                    streamed[1].write(chunk)
            self._write_training(m, out, streamed)
        finally:
            for staged in streamed:
                staged.discard()  # nothing when write_together placed it

    def _write_training(self, m: TrainingRunMetrics, out: Path, streamed: list[Staged]) -> None:
        # the run's files are written together (atomic.write_together): one sync of the folder, not one per file,
        # and that one deferred (to the next run's write or the end of the command): one journal commit per run
        files: dict[Path, str | Staged] = {staged.path: staged for staged in streamed}
        golden = golden_comparison(self.test_run, m) if m.ok else None
        extra: dict[str, Any] = {}
        if golden is not None:
            extra["golden"] = golden.to_json()
            text = json.dumps(golden.to_json(), indent=2, default=str) + "\n"
            files[out / "mbridge_golden.json"] = redact_report(text)
        skipped = plot_skipped(self.test_run) if m.iterations else None
        if skipped:
            extra["plot"] = skipped
        # CloudAI's own training_report.json (its TrainingResults schema) beside ours, streamed into its file (a
        # 10^6-iteration run's steps are never all held); none (and one log line saying why) for a run without steps
        # or memory. Past stats.SAMPLE_CAP steps its t99 / t95 are of a sample: the summary says so.
        notes: list[str] = []
        chunks = training_report_chunks(m, self.test_run.name, notes)
        if chunks is not None:
            streamed.append(Staged(out / TRAINING_REPORT_FILE))
            for chunk in chunks:
                streamed[-1].write(redact_report(chunk))
            files[streamed[-1].path] = streamed[-1]
        if notes:
            extra["training_report"] = "; ".join(notes)
        path, text = self.summary_file(m, **extra)
        files[path] = text
        write_together(files, defer_folder_sync=True)
        if m.iterations and not skipped:
            training_figure_path(self.test_run.name, m, out / "mbridge_iterations.png", golden)


# The most points a curve of the iteration PNG draws: 2^14, ~10 a pixel column of its ~1,600-pixel-wide panels. With
# 2^16 (stats.SAMPLE_CAP) matplotlib took +144 MiB for a 10^6-iteration run's three panels (62,500 points each), the
# largest part of the per-run report's peak.
PLOT_POINTS = 1 << 14


def _points(m: TrainingRunMetrics, attr: str) -> tuple[list[tuple[int, float]], int, int]:
    """(points, stride, count): (iteration, value) of every iteration that has the value, in log order; past
    :data:`PLOT_POINTS` of them a 1-in-``stride`` systematic sample (a 10^6-iteration run's points are never all
    held, nor drawn; the title says so, :func:`plot_note`)."""
    from ..metrics.stats import SystematicSample
    from ..metrics.training import field_values

    sample = SystematicSample("qd", PLOT_POINTS)
    # the two columns, not a record built per iteration (four passes over a 10^6-iteration run: three panels, title)
    for iteration, value in zip(field_values(m.iterations, "iteration"), field_values(m.iterations, attr),
                                strict=True):
        if value is not None:
            sample.add(iteration, value)
    return list(zip(*sample.columns, strict=True)), sample.stride, sample.seen


def plot_note(m: TrainingRunMetrics) -> str:
    """", points: a 1-in-k sample of n iterations" for a run past :data:`PLOT_POINTS` iterations, else ""."""
    if len(m.iterations) <= PLOT_POINTS:  # no panel can have more points than iterations
        return ""
    _, stride, n = _points(m, "elapsed_ms")  # the iteration-time panel's sample
    return "" if stride == 1 else f", points: a 1-in-{stride} sample of {n:,} iterations"


def training_figure_panels(m: TrainingRunMetrics, golden: GoldenComparison | None = None) -> list[Panel]:
    """Iteration time (warm-up left out), TFLOP/s per GPU (same) and lm loss (with the golden curve)."""
    times = _points(m, "elapsed_ms")[0]
    tflops = _points(m, "tflops_per_gpu")[0]
    loss = Panel("lm loss (nats)", {"lm loss": sorted(dict(_points(m, "lm_loss")[0]).items())})
    if golden is not None and golden.error is None:
        from ..metrics.golden import LOSS_KEY, load_golden_values, step_values

        curve = step_values(load_golden_values(golden.golden_path), LOSS_KEY)
        loss.references = {"golden": [(s + 1, v) for s, v in sorted(curve.items())]}
    return [
        time_panel("iteration time (ms)", {"iteration time": times}, m.warmup),
        time_panel("throughput (TFLOP/s per GPU)", {"TFLOP/s per GPU": tflops}, m.warmup),
        loss,
    ]


def training_title(name: str, m: TrainingRunMetrics, golden: GoldenComparison | None = None) -> str:
    verdict = "ok" if m.ok else f"{m.status}: {m.failure.reason()['failure_class'] or ', '.join(m.problems)}"
    if golden is not None:
        verdict += ", golden values " + ("met" if golden.passed else "breached")
    return f"{name}: {run_title(m.config)}\n{verdict} (engine {m.engine or 'unknown'}){plot_note(m)}"


def training_figure_path(
    name: str, m: TrainingRunMetrics, path: Path, golden: GoldenComparison | None = None
) -> Path:
    return series_plot(path, training_title(name, m, golden), training_figure_panels(m, golden), "iteration")


class MBridgeRefitReport(MBridgeReport):
    """refit-time: median ms of the timed refits; refit-bandwidth: GB/s (1e9 bytes) moved per second at the median.
    A run whose weights failed verification has no metric at all."""

    workload = "refit"
    metrics: ClassVar[list[str]] = ["default", "refit-time", "refit-bandwidth"]
    metric_fns: ClassVar[dict[str, Callable[[Any], float | None]]] = {
        "default": lambda m: m.time_ms.median,
        "refit-time": lambda m: m.time_ms.median,
        "refit-bandwidth": lambda m: m.bandwidth_gbps,
    }

    def get_metric(self, metric: str) -> MetricValue:
        m = self.parsed()
        if m.verify is None or m.verify.status != "pass":
            return METRIC_ERROR
        return super().get_metric(metric)

    def generate_report(self) -> None:
        m = self.parsed()
        out = self.test_run.output_path
        skipped = plot_skipped(self.test_run) if m.iterations else None
        write_together({out / "mbridge_refit_iterations.csv": refit_frame(m).to_csv(index=False),
                        **dict([self.summary_file(m, **({"plot": skipped} if skipped else {}))])},
                       defer_folder_sync=True)
        if m.iterations and not skipped:
            verify = m.verify.status if m.verify else "not verified"
            t = m.time_ms  # past SAMPLE_CAP timed refits the points are a 1-in-k sample: the title says so
            sample = f", points: a 1-in-{t.sample_stride} sample of {t.n:,} refits" if t.sampled else ""
            series_plot(
                out / "mbridge_refit_iterations.png",
                f"{self.test_run.name}: refit on {m.world_size} ranks\n{m.status}, verification {verify}{sample}",
                [("refit time (ms)", {"refit time": list(m.iterations)})],
                "timed refit (after warm-up)",
            )
