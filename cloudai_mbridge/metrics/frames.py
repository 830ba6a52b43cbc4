"""pandas views of the typed records. pandas is imported when a frame is asked for, never on the parsing path.

A leaf: the records build their rows (training.py ``iterations_frame``, refit.py ``refit_frame``) and hand them here;
nothing here imports the records back.
"""

from __future__ import annotations

import csv
import io
import math
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


_INT64 = 2**63


def _column_format(values: Sequence[Any]) -> Any:
    """How pandas writes this column of a frame built from dicts (None, a NaN and a missing key are all empty): a
    function of one present value, or None when the column is of a kind left to pandas itself."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    kinds = {type(v) for v in present}
    if kinds <= {str} or kinds == {bool}:  # object or bool columns: str() of the value
        return str
    if kinds <= {int, float}:
        if any(abs(v) >= _INT64 for v in present if type(v) is int):
            return None  # uint64 or object in pandas
        if kinds == {int} and len(present) == len(values):
            return str  # int64
        return lambda v: repr(float(v))  # float64 (an int column with a gap is float64 too)
    return None


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``frame(rows).to_csv(index=False)`` byte for byte, without building the frame (at 1,000 runs pandas took
    5 ms a run of the per-test report): columns in order of first appearance, an absent value empty, ints, floats
    (their shortest repr, as numpy writes a float64), bools and strings as pandas writes them. Any other kind of
    column, or no rows, is written by pandas."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    formats = []
    for col in columns:
        fmt = _column_format([row.get(col) for row in rows])
        if fmt is None or not rows:
            return frame(rows).to_csv(index=False)
        formats.append(fmt)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        line = []
        for col, fmt in zip(columns, formats, strict=True):
            v = row.get(col)
            line.append("" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt(v))
        writer.writerow(line)
    return out.getvalue()
