"""Issue 14: a scenario's names never put a job's files outside --output-dir, and two dry-runs of one scenario
started in the same second never share a results folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import toml
from helpers import CONF, dry_run, reap

from cloudai_mbridge.launch.payload import UnsafeOutputPathError, check_folder_name, claim_scenario_root

SCENARIO = CONF / "test_scenario" / "refit_cpu_smoke.toml"
SYSTEM = CONF / "system" / "local_slurm.toml"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# (which name, hostile value, what the message quotes)
HOSTILE = [
    ("id", "../../x", "test id '../../x'"),
    ("id", "../outside", "test id '../outside'"),
    ("id", "{abs}/abs", "test id '{abs}/abs'"),
    ("id", "a/b", "test id 'a/b'"),
    ("id", "..", "test id '..'"),
    ("name", "../../x", "scenario name '../../x'"),
    ("name", "{abs}/scenario", "scenario name '{abs}/scenario'"),
]


@pytest.mark.parametrize(("key", "value", "quoted"), HOSTILE)
def test_a_name_that_leaves_the_output_folder_is_refused(tmp_path: Path, key: str, value: str, quoted: str) -> None:
    outside = tmp_path / "outside_root"
    outside.mkdir()
    value, quoted = value.format(abs=outside), quoted.format(abs=outside)
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    scenario = toml.load(SCENARIO)
    if key == "id":
        scenario["Tests"][0]["id"] = value
    else:
        scenario["name"] = value
    path = work / "scenario.toml"
    path.write_text(toml.dumps(scenario))
    before = {p for p in tmp_path.rglob("*")}
    res = dry_run(SYSTEM, path, work, "--tests-dir", str(CONF / "test"))
    assert res.returncode != 0
    assert quoted in res.output and "outside --output-dir" in res.output and "Fix:" in res.output
    assert "Traceback" not in res.output
    assert _files(res.output_dir) == []  # nothing left behind in --output-dir
    created = {p for p in tmp_path.rglob("*")} - before
    # outside --output-dir only what is not a job's: the log file and CloudAI's install folder (system file)
    stray = [p for p in created if p.is_file() and p.name != "debug.log" and res.output_dir not in p.parents]
    assert stray == []
    assert _files(outside) == []


@pytest.mark.parametrize("value", ["x", "refit_cpu_smoke", "a.b-c_1"])
def test_plain_names_are_accepted(value: str) -> None:
    check_folder_name("test id", value, "here")


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "a\\b", "/abs", "a\0b"])
def test_unsafe_folder_names(value: str) -> None:
    with pytest.raises(UnsafeOutputPathError, match="Fix:"):
        check_folder_name("test id", value, "here")


def test_claiming_the_scenario_folder_is_atomic(tmp_path: Path) -> None:
    root = tmp_path / "s_2026-01-01_00-00-00"
    first, second, third = (claim_scenario_root(root) for _ in range(3))
    assert (first, second, third) == (root, root.with_name(root.name + "_2"), root.with_name(root.name + "_3"))


def test_two_dry_runs_in_the_same_second_get_their_own_folders(tmp_path: Path) -> None:
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "cloudai_mbridge", "--log-file", "{log}", "dry-run", "--system-config", str(SYSTEM),
           "--test-scenario", str(SCENARIO), "--output-dir", str(out)]
    procs = []
    for i in range(2):
        args = [a.format(log=tmp_path / f"debug{i}.log") for a in cmd]
        procs.append(subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        reap(*procs)
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not any("Traceback" in o for o in outputs)
    roots = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(roots) == 2  # never one folder shared by both runs
    counts = [len(list(root.rglob("mbridge_config.json"))) for root in roots]
    assert counts[0] == counts[1] > 0  # each run wrote its whole scenario into its own folder
