"""pandas views of the typed records. pandas is imported when a frame is asked for, never on the parsing path.

A leaf: the records build their rows (training.py ``iterations_frame``, refit.py ``refit_frame``) and hand them here;
nothing here imports the records back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd


class Summarised(Protocol):
    def summary(self) -> Mapping[str, Any]: ...


def frame(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per mapping (its keys are the columns, unless ``columns`` names them)."""
    import pandas as pd

    return pd.DataFrame(list(rows), columns=columns)


def runs_frame(runs: Iterable[Summarised]) -> pd.DataFrame:
    """One row per run (its ``summary()``), for comparison tables."""
    return frame(run.summary() for run in runs)
