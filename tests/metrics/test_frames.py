"""The per-test report's CSV is written without pandas (frames.csv_text); it must be what pandas writes, byte for
byte: the same columns in the same order, the same numbers, the same empty cells."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import SETTINGS

from cloudai_mbridge.metrics import iterations_csv, iterations_frame, parse_training_run
from cloudai_mbridge.metrics.frames import csv_text, frame

from .test_training_run import mixtral_run

NAMES = st.sampled_from(["iteration", "elapsed_ms", "lm_loss", "steady", "note", "load_balancing_loss"])
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet='ab,"\n 5.', max_size=4),
)
# one kind per column, as the records give (an int column with gaps, a float column, a bool one), and mixed ones
COLUMN = st.one_of(
    st.lists(st.one_of(st.none(), st.integers(min_value=-(2**64), max_value=2**64)), min_size=1, max_size=5),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=5),
    st.lists(st.one_of(st.none(), st.booleans()), min_size=1, max_size=5),
    st.lists(VALUES, min_size=1, max_size=5),
)


@SETTINGS
@given(st.dictionaries(NAMES, COLUMN, max_size=4), st.integers(min_value=0, max_value=5), st.data())
def test_csv_text_is_what_pandas_writes(columns: dict, n: int, data: st.DataObject) -> None:
    rows = []
    for i in range(n):
        row = {}
        for name, values in columns.items():
            if data.draw(st.booleans(), label=f"{name} present in row {i}"):  # a key missing from a row: NaN
                row[name] = values[i % len(values)]
        rows.append(row)
    assert csv_text(rows) == frame(rows).to_csv(index=False)


def test_iterations_csv_of_a_real_run(tmp_path: Path) -> None:
    m = parse_training_run(mixtral_run(tmp_path))
    text = iterations_csv(m)
    assert text == iterations_frame(m).to_csv(index=False)
    assert text.splitlines()[0].endswith(",complete,steady,stall,load_balancing_loss")
    assert len(text.splitlines()) == 1 + len(m.iterations)
