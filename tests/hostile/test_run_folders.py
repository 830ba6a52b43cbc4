"""Issue 46, item 4: a results tree with foreign entries among the numbered run folders is reported as far as it can
be, each skipped entry named on screen with why; CloudAI's reports (which sort run folders by ``int(name)``) are
written too, not "N report(s) could not be written".

The tree is a real dry-run of a 2 x 2 A/B with logs in Megatron's format (test_reports.build_ab_results).
"""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest
from helpers import CONF, run_cli
from test_reports import build_ab_results

from cloudai_mbridge.reports.common import run_folders

pytestmark = pytest.mark.slow  # spawns the CLI

SYSTEM = CONF / "system" / "slurm_h100_ib.toml"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the pristine results folder, its scenario file)."""
    tmp = tmp_path_factory.mktemp("ab")
    root, _ = build_ab_results(tmp)
    return root, next((tmp / "test_scenario").glob("*.toml"))


def _foreign(test: Path, outside: Path) -> list[Path]:
    """Foreign entries where CloudAI's run folders are: both levels of a sweep (<test>/<N>/<step>)."""
    iteration = test / "0"
    outside.mkdir()
    entries = [test / "1", iteration / "7", iteration / "notes", iteration / "9", test / "elsewhere"]
    entries[0].symlink_to("0")  # a link to a sibling: would count every run twice
    entries[1].symlink_to("1")
    entries[2].mkdir()
    entries[3].write_text("not a folder\n")
    entries[4].symlink_to(outside)  # a link out of the results folder: reports would write there
    return entries


def test_foreign_entries_are_named_and_the_rest_reported(tree: tuple[Path, Path], tmp_path: Path) -> None:
    pristine, scenario = tree
    root = tmp_path / pristine.name
    shutil.copytree(pristine, root, symlinks=True)
    for generated in ("mbridge_ab.csv", "mbridge_ab.html", f"{scenario.stem}.html"):
        (root / generated).unlink(missing_ok=True)
    test = next(p for p in root.iterdir() if p.is_dir())
    entries = _foreign(test, tmp_path / "outside")
    proc = run_cli("generate-report", "--system-config", str(SYSTEM), "--test-scenario", str(scenario),
                   "--result-dir", str(root), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "could not be written" not in out and "Error generating report" not in out and "Traceback" not in out
    for entry in entries:  # each named on screen, with why and a fix
        line = next((ln for ln in out.splitlines() if f"{entry}: skipped: " in ln), None)
        assert line is not None and "Fix:" in line, (entry, out)
    assert sum(f"{entries[0]}: skipped" in ln for ln in out.splitlines()) == 1  # once, not once per report
    with (root / "mbridge_ab.csv").open(encoding="utf-8") as fh:
        rows = {r["cell"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"mbs=1", "mbs=2"} and rows["mbs=1"]["verdict"] == "deepep faster"
    assert (root / f"{scenario.stem}.html").is_file()  # CloudAI's own scenario report, written as well
    assert not any((tmp_path / "outside").iterdir())  # nothing written through the link


def test_run_folders_names_each_kind(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "12").mkdir()
    (tmp_path / "trajectory.csv").write_text("")
    entries = _foreign(tmp_path, tmp_path.parent / f"{tmp_path.name}-outside")
    os.mkfifo(tmp_path / "3")
    found = dict(run_folders(tmp_path)) | dict(run_folders(tmp_path / "0"))
    assert found[tmp_path / "0"] is None and found[tmp_path / "12"] is None
    assert tmp_path / "trajectory.csv" not in found  # CloudAI's own file there: no run, not named
    assert "symbolic link" in found[entries[0]] and "symbolic link" in found[entries[4]]
    assert "not a run number" in found[entries[2]]
    assert "not a folder" in found[entries[3]] and "not a folder" in found[tmp_path / "3"]


def test_a_run_that_cannot_write_its_first_job_keeps_nothing(tmp_path: Path) -> None:
    """ulimit -f: the first job's files fail with EFBIG before anything is submitted. The run folder would hold only
    the run's inputs: removed, as a dry-run's is; an earlier results folder beside it stays as it was."""
    import resource
    import subprocess
    import sys

    out = tmp_path / "out"
    earlier = out / "earlier_2026-01-01_00-00-00"
    earlier.mkdir(parents=True)
    (earlier / "kept.txt").write_text("an earlier run's results\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    proc = subprocess.run(
        [sys.executable, "-m", "cloudai_mbridge", "--log-file", os.devnull, "run", "--system-config",
         str(CONF / "system" / "standalone_2gpu.toml"), "--test-scenario",
         str(CONF / "test_scenario" / "bridge_ab_2gpu_dsv3_deepep.toml"), "--output-dir", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    err = proc.stdout + proc.stderr
    assert proc.returncode == 1, err
    assert "[EFBIG]" in err and "Fix:" in err and "Traceback" not in err
    assert "stopped before any job was submitted" in err
    assert sorted(p.name for p in out.iterdir()) == [earlier.name]  # nothing new, the earlier folder kept
    assert (earlier / "kept.txt").read_text() == "an earlier run's results\n"
