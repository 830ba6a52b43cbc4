"""pandas views of the typed records. pandas is imported when a frame is asked for, never on the parsing path.

A leaf: the records build their rows (training.py ``iterations_frame``, refit.py ``refit_frame``) and hand them here;
nothing here imports the records back.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    column = _Column()
    for v in values:
        column.see(v)
    return column.format(len(values))


class _Column:
    """What :func:`_column_format` needs of a column, gathered a value at a time (the rows are never all held)."""

    __slots__ = ("big", "kinds", "present")

    def __init__(self) -> None:
        self.kinds: set[type] = set()
        self.present = 0
        self.big = False

    def see(self, v: Any) -> None:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return
        self.present += 1
        self.kinds.add(type(v))
        if type(v) is int and abs(v) >= _INT64:
            self.big = True

    def format(self, n_rows: int) -> Any:
        kinds = self.kinds
        if kinds <= {str} or kinds == {bool}:  # object or bool columns: str() of the value
            return str
        if kinds <= {int, float}:
            if self.big:
                return None  # uint64 or object in pandas
            if kinds == {int} and self.present == n_rows:
                return str  # int64
            return lambda v: repr(float(v))  # float64 (an int column with a gap is float64 too)
        return None


def csv_text_of(rows: Callable[[], Iterable[Mapping[str, Any]]]) -> str:
    """:func:`csv_text` of the rows ``rows()`` yields, made twice (once to learn the columns and their kinds, once to
    write them) so that no more than one row is held at a time: a 10^6-iteration run's CSV without 10^6 dicts."""
    return "".join(csv_chunks_of(rows))


CHUNK = 1 << 20  # characters of CSV text handed over at a time by csv_chunks_of


def csv_chunks_of(rows: Callable[[], Iterable[Mapping[str, Any]]]) -> Iterator[str]:
    """:func:`csv_text_of` in pieces of about :data:`CHUNK` characters, for a file written as they come: the text of
    a 10^6-iteration run's CSV (~150 MB) is never held whole."""
    columns: dict[str, _Column] = {}
    n = 0
    for row in rows():
        n += 1
        for key, v in row.items():
            column = columns.get(key)
            if column is None:
                column = columns[key] = _Column()
            column.see(v)
    formats = [c.format(n) for c in columns.values()]
    if not n or any(f is None for f in formats):
        yield csv_text(list(rows()))  # a kind of column pandas writes itself, or no rows: as csv_text does
        return
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows():
        writer.writerow(["" if (v := row.get(col)) is None or (isinstance(v, float) and math.isnan(v)) else fmt(v)
                         for col, fmt in zip(columns, formats, strict=True)])
        if out.tell() >= CHUNK:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


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
