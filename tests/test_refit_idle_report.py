"""The refit report says which ranks idled: a non-collocated refit on more ranks than its two layouts take leaves the
rest idle (megatron-core's refit: "(None, None): Idle rank"), and the table's idle-ranks column names them."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from cloudai_mbridge.metrics import parse_refit_run
from cloudai_mbridge.reports.refit_table import refit_row, write_refit_report

RUN = Path(__file__).parent / "fixtures" / "logs" / "gpu" / "refit_tp2-ep2_1l"


def _with(m, **recorded):
    return dataclasses.replace(m, recorded={**(m.recorded or {}), **recorded})


def test_idle_ranks_come_from_what_ran() -> None:
    m = parse_refit_run(RUN)
    assert m.idle_ranks == "none"  # collocated, 2 ranks: a log from before idle ranks, read from its layouts
    layout = {"src": {"first_rank": 0, "world": 64}, "dst": {"first_rank": 64, "world": 32}}
    assert _with(m, layout=layout, world_size=128).idle_ranks == "96-127"
    assert _with(m, layout=layout, world_size=97).idle_ranks == "96"
    assert _with(m, idle_ranks="6-7").idle_ranks == "6-7"  # the payload's own word wins
    assert _with(m, layout=None).idle_ranks is None


def test_the_refit_table_names_the_idle_ranks(tmp_path: Path) -> None:
    from cloudai_mbridge.reports.provenance import collect

    m = _with(parse_refit_run(RUN), idle_ranks="6-7")
    row = refit_row("t", 1, m.config, m, str(RUN))
    assert row["idle_ranks"] == "6-7"
    write_refit_report(tmp_path, "Refit", [row], collect(tmp_path, [], system="s", scenario="sc"))
    page = (tmp_path / "mbridge_refit.html").read_text()
    assert "<th>idle ranks</th>" in page and ">6-7</td>" in page
    with (tmp_path / "mbridge_refit.csv").open() as f:
        assert next(csv.DictReader(f))["idle_ranks"] == "6-7"
