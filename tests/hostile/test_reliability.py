"""Issue 26: the operating system refusing a write, symlinks planted where the plugin writes, signals mid-sweep and
mid-write, a log shrinking under the reader: every row of reliability.py through the real CLI, judged by the
hostile table's checks (no traceback, a one-line message with the path and the fix, nothing partial, nothing
outside, no data lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostile.reliability import CLASSES, AbTree, build_ab, row_ids, run_row

ROWS = [(cls, row) for cls in CLASSES for row in row_ids(cls)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> AbTree:
    return build_ab(tmp_path_factory.mktemp("ab"))


def test_every_class_has_rows() -> None:
    assert {cls for cls, _ in ROWS} == set(CLASSES)
    assert len([r for c, r in ROWS if c == "planted symlink"]) >= 9


@pytest.mark.parametrize(("cls", "row"), ROWS, ids=[f"{c.replace(' ', '-')}:{r}" for c, r in ROWS])
def test_row_is_handled(tree: AbTree, tmp_path: Path, cls: str, row: str) -> None:
    trial = run_row(cls, row, tmp_path, tree)
    if trial.skipped:
        pytest.skip(trial.skipped)
    assert trial.problems == [], f"{trial.problems}\n{trial.output[-3000:]}"


def test_a_run_folder_linked_out_of_the_results_gets_no_report_file_written_there(tree: AbTree, tmp_path: Path) -> None:
    """generate-report writes each run's summary, CSV and plot into the run's folder: a run folder that is a symbolic
    link to a folder elsewhere had them written there, outside --result-dir."""
    import hashlib
    import shutil

    ab = tree.copy(tmp_path / "case")
    run = ab.runs()[-1]
    outside = tmp_path / "outside" / "run"
    outside.parent.mkdir()
    shutil.move(str(run), str(outside))
    run.symlink_to(outside, target_is_directory=True)

    def state() -> dict[str, str]:
        return {str(p.relative_to(outside)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in outside.rglob("*") if p.is_file()}

    before = state()
    proc = ab.report(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert state() == before  # nothing written or rewritten where the link points
    assert "symbolic link" in proc.stdout + proc.stderr  # named, with why (reports/common.py)
