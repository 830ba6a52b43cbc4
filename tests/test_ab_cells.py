"""benchmarks/ab_cells.py: which recorded A/B cells count (>= 3 starts per arm, same routing, loss inside the work
gate, a verdict), per (model, mbs, arm), never pooling hosts."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import ab_cells
import pytest

CELLS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bridge_ab_4gpu"


def _run(capsys: pytest.CaptureFixture[str], *cells: Path) -> tuple[int, str]:
    rc = ab_cells.main([str(c) for c in cells])
    return rc, capsys.readouterr().out


def test_recorded_cells_count_six(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys)
    assert rc == 0
    assert re.search(r"^RESULT ab_bridge_cells=6 ", out, flags=re.M)
    # host 10: the first hybridep cell (2 GPUs, through `cloudai run`); host 9's run of it failed and does not count
    assert re.search(r"^dsv3_mbs1_hybridep_2gpu_h10: deepseek_v3_proxy mbs 1 ep 2 hybridep: counts: within noise, "
                     r"-12\.6 % \[-26\.5\.\.\+2\.7\], 3 \+ 3 starts", out, flags=re.M)
    assert re.search(r"^dsv3_mbs1_hybridep_2gpu_h9: .* does not count: verdict: invalid", out, flags=re.M)
    # host 6: the first UCCL-EP cell with 3 + 3 starts, alltoall faster
    assert re.search(r"^dsv3_mbs1_deepep_h6: deepseek_v3_proxy mbs 1 ep 4 deepep: counts: alltoall faster, \+6\.5 %",
                     out, flags=re.M)
    # host 7: the same DSV3 mbs 1 ncclep cell as host 5, run by `cloudai run --test-scenario` (its own report)
    assert re.search(r"^dsv3_mbs1_cloudai_h7: deepseek_v3_proxy mbs 1 ep 4 ncclep: counts: within noise, \+1\.0 % "
                     r"\[-7\.2\.\.\+13\.2\], 3 \+ 3 starts", out, flags=re.M)
    assert re.search(r"^cell deepseek_v3_proxy mbs 1 ep 4 ncclep: dsv3_mbs1_cloudai_h7, dsv3_mbs1_h200$", out,
                     flags=re.M)
    # the DSV3 cells of host 4 ran 3 + 3 starts but left the loss envelope: listed, not counted
    assert re.search(r"^dsv3_mbs1_h4: deepseek_v3_proxy mbs 1 ep 4 ncclep: does not count: work gate", out, flags=re.M)
    assert "cell deepseek_v3_proxy mbs 2 ep 4 ncclep: dsv3_mbs2_h200" in out


def _edit(cell: Path, **changes: str) -> None:
    table = cell / "mbridge_ab.csv"
    with table.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row.update(changes)
    with table.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("changes, reason", [
    ({"arm_starts": "2"}, "3 + 2 starts"),
    ({"routing": "different routing in run x"}, "routing: different routing"),
    ({"work": "lm loss 7.1 at iteration 9 is outside"}, "work gate: lm loss 7.1"),
    ({"verdict": "invalid: ncclep s0 failed"}, "verdict: invalid"),
])
def test_a_cell_short_of_any_condition_does_not_count(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      changes: dict[str, str], reason: str) -> None:
    cell = tmp_path / "dsv3_mbs2_h200"
    shutil.copytree(CELLS / "dsv3_mbs2_h200", cell, ignore=shutil.ignore_patterns("*.png", "*.html"))
    _edit(cell, **changes)
    rc, out = _run(capsys, cell)
    assert rc == 0
    assert f"does not count: {reason}" in out
    assert re.search(r"^RESULT ab_bridge_cells=0 ", out, flags=re.M)


def test_a_folder_without_a_report_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ab_cells.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "--report" in err and "Traceback" not in err


def test_a_cell_whose_arm_failed_every_start_says_so_and_is_a_cell_of_its_own_ep(
        capsys: pytest.CaptureFixture[str]) -> None:
    # 2 x H200 (2026-11-29, `cloudai run`): the hybridep arm died at its first dispatch in all 3 starts; only the arm's
    # run folder came back. The line names the failure (not a gate it never reached) and the cell's ep (2, not 4).
    rc, out = _run(capsys, CELLS / "dsv3_mbs1_hybridep_2gpu_h9")
    assert rc == 0
    assert re.search(r"^dsv3_mbs1_hybridep_2gpu_h9: deepseek_v3_proxy mbs 1 ep 2 hybridep: does not count: verdict: "
                     r"invalid: hybridep 2: status failed \(Python exception on rank 0: AssertionError: The number of "
                     r"ranks 2 should be divisible by the number of ranks per node 8", out, flags=re.M)
    assert re.search(r"^RESULT ab_bridge_cells=0 ", out, flags=re.M)


def test_the_same_model_and_mbs_at_another_ep_is_another_cell(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cell = tmp_path / "dsv3_mbs2_2gpu"
    shutil.copytree(CELLS / "dsv3_mbs2_h200", cell, ignore=shutil.ignore_patterns("*.png", "*.html"))
    with (cell / "mbridge_ab.csv").open(newline="") as fh:
        base_run = Path(next(csv.DictReader(fh))["base_run"])
    config = tmp_path / "base" / "mbridge_config.json"
    config.parent.mkdir()
    recorded = (Path(ab_cells.ROOT) / base_run / "mbridge_config.json").read_text()
    config.write_text(recorded.replace('"ep": 4', '"ep": 2'))
    assert '"ep": 2' in config.read_text()
    _edit(cell, base_run=str(config.parent), arm_run=str(config.parent))
    rc, out = _run(capsys, CELLS / "dsv3_mbs2_h200", cell)
    assert rc == 0
    assert "cell deepseek_v3_proxy mbs 2 ep 2 ncclep: dsv3_mbs2_2gpu" in out
    assert "cell deepseek_v3_proxy mbs 2 ep 4 ncclep: dsv3_mbs2_h200" in out
    assert re.search(r"^RESULT ab_bridge_cells=2 ", out, flags=re.M)
