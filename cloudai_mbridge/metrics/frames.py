"""pandas views of the typed records. pandas is imported when a frame is asked for, never on the parsing path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .training import config_int, tokens_per_s

if TYPE_CHECKING:
    import pandas as pd

    from .refit import RefitRunMetrics
    from .training import TrainingRunMetrics


def iterations_frame(metrics: TrainingRunMetrics) -> pd.DataFrame:
    """One row per logged iteration; ``steady`` marks the rows the statistics use, ``stall`` the slow ones."""
    import pandas as pd

    gbs, seq = config_int(metrics.config, "gbs"), config_int(metrics.config, "seq_length")
    steady, stalls = set(metrics.steady_iterations), set(metrics.stall_iterations)
    rows = []
    for r in metrics.iterations:
        rows.append(
            {
                "iteration": r.iteration,
                "train_iters": r.train_iters,
                "elapsed_ms": r.elapsed_ms,
                "tflops_per_gpu": r.tflops_per_gpu,
                "tokens_per_s": tokens_per_s(r, gbs, seq),
                "lm_loss": r.lm_loss,
                "grad_norm": r.grad_norm,
                "learning_rate": r.learning_rate,
                "global_batch_size": r.global_batch_size,
                "skipped_iterations": r.skipped_iterations,
                "nan_iterations": r.nan_iterations,
                "complete": r.complete,
                "steady": r.iteration in steady,
                "stall": r.iteration in stalls,
                **dict(r.losses),
            }
        )
    return pd.DataFrame(rows)


def refit_frame(metrics: RefitRunMetrics) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([{"iter": i, "time_ms": ms} for i, ms in metrics.iterations], columns=["iter", "time_ms"])


def runs_frame(runs: Iterable[TrainingRunMetrics | RefitRunMetrics]) -> pd.DataFrame:
    """One row per run (its ``summary()``), for comparison tables."""
    import pandas as pd

    return pd.DataFrame([run.summary() for run in runs])
