"""cloudai-mbridge run on the real local Slurm: jobs go through sbatch/srun, CloudAI tracks them through sacct to
the end, and generate-report builds the refit table from what the payload really printed."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest
import toml
from helpers import CONF, run_cli, write_case
from slurm_support import SlurmCluster

pytestmark = pytest.mark.slurm
SYSTEM = CONF / "system" / "local_slurm.toml"


def cloudai_run(scenario: Path, tmp: Path, out: Path) -> tuple[int, str, Path]:
    proc = run_cli("run", "--system-config", str(SYSTEM), "--test-scenario", str(scenario), "--output-dir", str(out),
                   cwd=tmp, timeout=1500)
    roots = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, roots[-1] if roots else out


def refit_case(tmp: Path, cmd_args: dict, name: str = "case", extra_env: dict | None = None) -> Path:
    test = toml.load(CONF / "test" / "refit_cpu_smoke.toml")
    test["name"] = name
    test["cmd_args"].update(cmd_args)
    if extra_env:
        test["extra_env_vars"] = extra_env
    _, scenario = write_case(
        tmp, toml.dumps(test),
        f'name = "{name}"\n[[Tests]]\nid = "{name}"\ntest_name = "{name}"\nnum_nodes = 2\ntime_limit = "00:10:00"\n',
    )
    return scenario


def test_refit_cpu_smoke_sweep_runs_tracks_and_reports(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    rc, output, root = cloudai_run(CONF / "test_scenario" / "refit_cpu_smoke.toml", tmp_path, tmp_path / "results")
    assert rc == 0, output
    assert "run: 4 point(s): 4 job(s) ran (4 passed, 0 failed), 0 skipped by a rule" in output
    assert "rejected" not in output and "[ERROR]" not in output, "the quick start has no rejected point"
    assert f"run: reports in {root}: mbridge_refit.csv, mbridge_refit.html" in output
    steps = sorted((root / "refit_cpu_smoke" / "0").glob("[0-9]*"))
    assert len(steps) == 4, "four sweep points, all valid on 4 ranks"
    for step in steps:
        job = toml.load(step / "slurm-job.toml")
        assert job["state"] == "COMPLETED" and int(job["job_id"]) > 0, job
        assert len(list((step / "logs").glob("rank-*.log"))) == 4
    with (root / "refit_cpu_smoke" / "0" / "trajectory.csv").open() as f:
        trajectory = list(csv.DictReader(f))
    assert len(trajectory) == 4 and all(float(r["reward"]) > 0 for r in trajectory), trajectory

    with (root / "mbridge_refit.csv").open() as f:
        table = list(csv.DictReader(f))
    assert {r["mapping"] for r in table} == {"TP2·EP2 → TP1·EP4", "TP2·EP2 → TP1·EP1", "TP2·EP2 → TP4·EP1·ETP1",
                                             "TP2·EP2 → TP4·EP4·ETP1"}, "full layout names on both sides"
    for row in table:
        assert row["verification"] == "pass" and row["status"] == "ok", row
        assert 0 < float(row["time_ms_min"]) <= float(row["time_ms_median"]) <= float(row["time_ms_max"])
        assert int(row["ranks"]) == 4 and int(row["n"]) == 3

    # generate-report on the same folder alone gives the same table (reports are re-derivable from the logs, and the
    # run kept its system, scenario and test files there).
    before = (root / "mbridge_refit.csv").read_text()
    (root / "mbridge_refit.csv").unlink()
    proc = run_cli("generate-report", "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "mbridge_refit.csv").read_text() == before


def test_run_exits_1_after_running_the_rest_when_a_rejection_is_not_declared(slurm_cluster: SlurmCluster,
                                                                             tmp_path: Path) -> None:
    scenario = refit_case(tmp_path, {"dst": {"tp": 1, "etp": 1, "ep": [4, 8]}, "iterations": 1})
    rc, output, root = cloudai_run(scenario, tmp_path, tmp_path / "results")
    assert rc == 1, output
    assert "run: 2 point(s): 1 job(s) ran (1 passed, 0 failed), 1 skipped by a rule:" in output
    assert "skipped, NOT declared in expected_rejections: case point 2 (dst.ep=8): [refit-layout]" in output
    job = toml.load(root / "case" / "0" / "1" / "slurm-job.toml")
    assert job["state"] == "COMPLETED", "the valid point ran"
    assert "Skipped points" in (root / "mbridge_refit.html").read_text()


def test_a_failing_job_is_reported_failed_with_its_reason(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    # A whole-run timeout of 1 s: the payload gives up (exit 4) with a REFIT_ERROR line, srun fails the job.
    scenario = refit_case(tmp_path, {"timeout_s": 1, "dst": {"tp": 1, "ep": 4, "etp": 1}})
    rc, output, root = cloudai_run(scenario, tmp_path, tmp_path / "results")
    assert rc == 1, "a run whose every job failed must not exit 0"
    assert "run: every job failed (1 of 1)" in output, output
    # Every rank times out on its own clock, so which one reports first varies from run to run.
    assert re.search(r'refit error on rank [0-3]: REFIT_ERROR phase=\w+ rank=[0-3] message="timed out after 1 s"',
                     output), output
    run = root / "case" / "0"
    job = toml.load(run / "slurm-job.toml")
    assert job["state"] == "FAILED", job
    summary = json.loads((run / "mbridge_summary.json").read_text())
    assert (summary["status"], summary["failure"]) == ("failed", "refit_error")
    assert set(summary["metrics"].values()) == {"METRIC_ERROR"}, "a failed run must not feed a number to DSE"
    with (root / "mbridge_refit.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert (row["status"], row["verification"], row["time_ms_median"]) == ("failed", "missing", "")
    logs = "".join(f.read_text() for f in (run / "logs").glob("rank-*.log"))
    assert "timed out after 1 s" in logs, "the reason is in the rank logs"


def test_hostile_strings_do_not_execute_on_a_real_slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    pwn = tmp_path / "pwn"
    pwn.mkdir()
    # an interpreter that is no path or command name (here one with a shell command) is refused before any job
    hostile_python = refit_case(tmp_path / "py", {"python": f"python3; touch {pwn}/python",
                                                  "dst": {"tp": 1, "ep": 4, "etp": 1}})
    rc, output, _ = cloudai_run(hostile_python, tmp_path / "py", tmp_path / "py" / "results")
    assert rc != 0 and "is not an interpreter" in output, output[-2000:]
    scenario = refit_case(
        tmp_path,
        {"dst": {"tp": 1, "ep": 4, "etp": 1}},
        extra_env={"HOSTILE": f"$(touch {pwn}/env) `touch {pwn}/tick`; touch {pwn}/semi"},
    )
    _, _, root = cloudai_run(scenario, tmp_path, tmp_path / "results")
    job = toml.load(root / "case" / "0" / "slurm-job.toml")
    assert job["state"] == "COMPLETED", "the hostile value is data: the job runs as it would without it"
    assert list(pwn.iterdir()) == []


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_runs_of_one_scenario_never_overwrite_each_other(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    scenario = refit_case(tmp_path, {"dst": {"tp": 1, "ep": 1}, "iterations": 1})
    out = tmp_path / "results"
    rc1, output1, first = cloudai_run(scenario, tmp_path, out)
    assert rc1 == 0, output1
    logs_before = _digest(first / "case")
    rc2, output2, second = cloudai_run(scenario, tmp_path, out)
    assert rc2 == 0, output2
    assert second != first
    assert _digest(first / "case") == logs_before
    assert (second / "case" / "0" / "logs" / "rank-0.log").is_file()
