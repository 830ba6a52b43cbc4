"""Log text -> typed records: where every number in a report comes from.

Plain Python (no CloudAI, no pydantic; pandas only in :mod:`.frames`). Entry points:

- :func:`parse_training_run` / :func:`parse_refit_run` / :func:`parse_run`: a run folder -> metrics with a ``status``
  that says what was missing (``ok``, ``no_iterations``, ``missing_rank_log``, ``truncated``, ...);
- :func:`classify_failure`: a run folder -> :class:`FailureReport` (OOM, NCCL timeout, segfault, node failure, NaN,
  dispatcher downgrade, ...);
- :func:`compare_golden`: a run against a golden-values file (Megatron-Bridge's evaluate.py checks);
- :func:`steady_state` and :func:`loss_equivalence`: the statistics the A/B reports rest on.

The two log lines the training payload must print for the dispatcher checks are specified in :mod:`.signals`.
"""

from .frames import runs_frame
from .golden import GoldenCheck, GoldenComparison, GoldenThresholds, compare_golden, golden_values
from .layout import RunLayout, dp_rank0_ranks, load_layout
from .refit import RefitRunMetrics, RefitVerify, parse_refit_run, refit_frame
from .runs import classify_failure, parse_run
from .signals import (
    DispatcherReport,
    FailureFinding,
    FailureReport,
    ValiditySignals,
    classify_line,
)
from .stats import Stats, loss_equivalence, percentile, steady_state
from .training import (
    IterationRecord,
    MemoryReport,
    StepTimeRecord,
    TrainingRunMetrics,
    iterations_csv,
    iterations_frame,
    parse_iteration_line,
    parse_memory_line,
    parse_step_time_line,
    parse_training_run,
    warmup_count,
)

__all__ = [
    "DispatcherReport",
    "FailureFinding",
    "FailureReport",
    "GoldenCheck",
    "GoldenComparison",
    "GoldenThresholds",
    "IterationRecord",
    "MemoryReport",
    "RefitRunMetrics",
    "RefitVerify",
    "RunLayout",
    "Stats",
    "StepTimeRecord",
    "TrainingRunMetrics",
    "ValiditySignals",
    "classify_failure",
    "classify_line",
    "compare_golden",
    "dp_rank0_ranks",
    "golden_values",
    "iterations_csv",
    "iterations_frame",
    "load_layout",
    "loss_equivalence",
    "parse_iteration_line",
    "parse_memory_line",
    "parse_refit_run",
    "parse_run",
    "parse_step_time_line",
    "parse_training_run",
    "percentile",
    "refit_frame",
    "runs_frame",
    "steady_state",
    "warmup_count",
]
