"""Per-test reports (CSV, summary, plot) and DSE metrics for both workloads, from the metrics/ parsers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from cloudai.core import METRIC_ERROR, JobStatusResult, MetricValue, ReportGenerationStrategy

from ..metrics import RefitRunMetrics, TrainingRunMetrics, iterations_frame, load_layout, parse_run, refit_frame
from ..reports.plots import series_plot

Metrics = TrainingRunMetrics | RefitRunMetrics


def run_status(output_path: Path) -> JobStatusResult:
    """Success only when the logs show a complete, valid run; otherwise the parser's reason and the failure kind."""
    m = parse_run(output_path)
    if m.ok:
        return JobStatusResult(is_successful=True)
    reason = m.failure.primary or m.status
    details = ", ".join(m.problems) or m.status
    verify = getattr(m, "verify", None)
    if verify is not None and verify.status == "fail":
        reason = f"refit verification failed ({verify.mismatched} of {verify.params} parameters differ)"
    return JobStatusResult(is_successful=False, error_message=f"{reason} [{details}] in {output_path}")


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
        return (path / "mbridge_config.json").is_file() and load_layout(path).workload == self.workload

    def get_metric(self, metric: str) -> MetricValue:
        fn = self.metric_fns.get(metric)
        m = self.parsed()
        if fn is None or not m.ok:
            return METRIC_ERROR
        value = fn(m)
        return METRIC_ERROR if value is None else float(value)

    def write_summary(self, m: Metrics) -> None:
        summary = m.summary()
        summary["metrics"] = {name: self.get_metric(name) for name in self.metrics}
        path = self.test_run.output_path / "mbridge_summary.json"
        path.write_text(json.dumps(summary, indent=2, default=str, sort_keys=True) + "\n")


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


class MBridgeTrainingReport(MBridgeReport):
    """iteration-time: steady-state mean seconds per iteration; tflops-per-gpu: mean model TFLOP/s per GPU;
    tokens-per-second: mean gbs*seq_length/iteration time. ``default`` is iteration-time (lower is better)."""

    workload = "training"
    metrics: ClassVar[list[str]] = ["default", "iteration-time", "tflops-per-gpu", "tokens-per-second"]
    metric_fns: ClassVar[dict[str, Callable[[Any], float | None]]] = {
        "default": lambda m: _s(m.iteration_time_ms.mean),
        "iteration-time": lambda m: _s(m.iteration_time_ms.mean),
        "tflops-per-gpu": lambda m: m.tflops_per_gpu.mean,
        "tokens-per-second": lambda m: m.tokens_per_s.mean,
    }

    def generate_report(self) -> None:
        m = self.parsed()
        out = self.test_run.output_path
        frame = iterations_frame(m)
        frame.to_csv(out / "mbridge_iterations.csv", index=False)
        self.write_summary(m)
        if not frame.empty:
            times = [(r.iteration, r.elapsed_ms) for r in m.iterations if r.elapsed_ms is not None]
            losses = sorted(m.loss_curve.items())
            series_plot(
                out / "mbridge_iterations.png",
                f"{self.test_run.name}: {m.status}",
                [("iteration time (ms)", {"time": times}), ("lm loss", {"loss": losses})],
                "iteration",
            )


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
        refit_frame(m).to_csv(out / "mbridge_refit_iterations.csv", index=False)
        self.write_summary(m)
        if m.iterations:
            series_plot(
                out / "mbridge_refit_iterations.png",
                f"{self.test_run.name}: {m.status}",
                [("refit time (ms)", {"time": list(m.iterations)})],
                "timed iteration",
            )
