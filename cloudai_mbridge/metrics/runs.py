"""Entry points that look at a run folder and pick the parser its config asks for."""

from __future__ import annotations

from pathlib import Path

from .layout import load_layout
from .refit import RefitRunMetrics, parse_refit_run
from .signals import FailureReport
from .training import TrainingRunMetrics, parse_training_run


def parse_run(run_dir: Path | str, workers: int = 1) -> TrainingRunMetrics | RefitRunMetrics:
    """``workload`` in mbridge_config.json decides; a run without a readable config is read as training."""
    if load_layout(run_dir).workload == "refit":
        return parse_refit_run(run_dir, workers=workers)
    return parse_training_run(run_dir, workers=workers)


def classify_failure(run_dir: Path | str, workers: int = 1) -> FailureReport:
    """Why a run failed (or ``status="ok"`` / ``"incomplete"``); see :mod:`.signals` for the kinds and their order."""
    return parse_run(run_dir, workers=workers).failure
