"""What a new user meets in the first hour: a dry-run that says what it wrote and nothing that looks like a failure,
verify-configs / list / --version that work on the plugin's own files, generate-report that refuses the wrong folder,
jobs that run the interpreter that has the payload's dependencies, a run that fails when every job failed."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from helpers import CONF, dry_run, run_cli, sbatch_scripts, write_case

B300 = CONF / "system" / "slurm_b300_efa.toml"
NO_SLURM = {"PATH": "/nonexistent-no-slurm-tools"}  # sinfo, squeue, scontrol, sacct: command not found
FAILURE_SIGNS = ("[ERROR]", "command not found", "Submitted slurm job", "Reward", "FAILED", "Traceback")


def test_dry_run_without_slurm_tools_says_what_it_wrote(tmp_path: Path) -> None:
    res = dry_run(B300, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", tmp_path, env=NO_SLURM)
    assert res.returncode == 0, res.output
    for sign in FAILURE_SIGNS:
        assert sign not in res.output, f"{sign!r} in a successful dry-run:\n{res.output}"
    (root,) = [p for p in res.output_dir.iterdir() if p.is_dir()]
    assert f"dry-run: nothing was submitted; 8 job(s) written under {root}:" in res.output
    assert "kimi_k2_dispatcher_ab/0/8/  cloudai_sbatch_script.sh, mbridge_config.json" in res.output
    assert len(sbatch_scripts(res.output_dir)) == 8
    # --gpus-per-node without asking scontrol: the system file declares 8 GPUs per node
    assert "#SBATCH --gpus-per-node=8" in sbatch_scripts(res.output_dir)[0].read_text()


def test_single_point_dry_run_writes_no_report(tmp_path: Path) -> None:
    res = dry_run(B300, CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path, env=NO_SLURM)
    assert res.returncode == 0, res.output
    for sign in FAILURE_SIGNS:
        assert sign not in res.output, f"{sign!r} in a successful dry-run:\n{res.output}"
    (root,) = [p for p in res.output_dir.iterdir() if p.is_dir()]
    assert sorted(p.name for p in root.iterdir()) == ["kimi_k2_sft"], "no status table, no empty A/B report"
    assert "1 job(s) written under" in res.output


def test_dry_run_whose_every_point_is_rejected_exits_1(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path / "conf",
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2"\ngpu = "b300"\ntp = 8\npp = 8\nvp = 2\nep = [7, 5]\ngbs = 256\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\n',
    )
    res = dry_run(B300, scenario, tmp_path, env=NO_SLURM)
    assert res.returncode == 1, res.output
    assert "every point of its sweep is rejected" in res.output and "nothing was written or submitted" in res.output
    assert "[experts-per-ep]" in res.output and "Traceback" not in res.output


def test_jobs_without_a_container_run_the_submitting_interpreter(tmp_path: Path) -> None:
    res = dry_run(CONF / "system" / "local_slurm.toml", CONF / "test_scenario" / "refit_cpu_smoke.toml", tmp_path,
                  env=NO_SLURM)
    assert res.returncode == 0, res.output
    for script in sbatch_scripts(res.output_dir):
        assert f" {sys.executable} -m mbridge_payload.refit --config " in script.read_text()


def test_verify_configs_on_the_scenario_folder_uses_the_tests_beside_it(tmp_path: Path) -> None:
    proc = run_cli("verify-configs", str(CONF / "test_scenario"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"scenarios checked against the tests in {CONF / 'test'}" in proc.stdout
    assert "[ERROR]" not in proc.stdout


def test_verify_configs_says_why_a_file_fails(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path / "conf",
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2"\ngpu = "b300"\nbogus = 1\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\n',
    )
    proc = run_cli("verify-configs", str(scenario.parent), cwd=tmp_path)
    assert proc.returncode == 2  # an input that cannot be read (exits.py)
    test_file = tmp_path / "conf" / "test" / "case.toml"
    assert (f"{test_file}: 'cmd_args.bogus' = 1 is not a field of the MBridgeTraining test" in proc.stderr
            and "Extra inputs are not permitted" not in proc.stdout + proc.stderr), proc.stdout + proc.stderr


def test_list_shows_the_plugin_workloads_and_version_names_the_plugin(tmp_path: Path) -> None:
    proc = run_cli("list", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"MBridgeTraining"' in proc.stdout and '"MBridgeRefit"' in proc.stdout
    proc = run_cli("list", "workloads", cwd=tmp_path)
    assert '"MBridgeRefit"' in proc.stdout and "CloudAI's own workloads" in proc.stdout
    proc = run_cli("list", "reports", cwd=tmp_path)
    assert "mbridge_ab" in proc.stdout
    proc = run_cli("--version", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("cloudai-mbridge ") and "with CloudAI " in proc.stdout


def _generate_report(tmp: Path, scenario: Path, result_dir: Path, system: Path = B300):
    return run_cli("generate-report", "--system-config", str(system), "--test-scenario", str(scenario),
                   "--result-dir", str(result_dir), cwd=tmp)


def test_generate_report_refuses_an_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _generate_report(tmp_path, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", empty)
    assert proc.returncode == 1
    assert "holds no results of scenario 'kimi_k2_dispatcher_ab'" in proc.stdout and "it is empty" in proc.stdout
    assert list(empty.iterdir()) == []


def test_generate_report_refuses_another_scenarios_results(tmp_path: Path) -> None:
    res = dry_run(B300, CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path, env=NO_SLURM)
    (root,) = [p for p in res.output_dir.iterdir() if p.is_dir()]
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    proc = _generate_report(tmp_path, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", root)
    assert proc.returncode == 1
    assert "it holds kimi_k2_sft" in proc.stdout
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_a_run_whose_every_job_failed_exits_1(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from cloudai_mbridge.cli.session import Session, finish_run

    root = tmp_path / "scenario_2026"
    for step in (1, 2):
        run = root / "refit" / "0" / str(step)
        (run / "logs").mkdir(parents=True)
        (run / "mbridge_config.json").write_text(json.dumps({"workload": "refit"}))
        (run / "logs" / "rank-0.log").write_text("/usr/bin/python3: No module named torch\n")
    s = Session("run", scenario_roots=[root])
    with caplog.at_level(logging.INFO):
        assert finish_run(s, 0) == 1
    assert "run: every job failed (2 of 2)" in caplog.text
    lines = [r.getMessage() for r in caplog.records if str(root) in r.getMessage()]
    assert len(lines) == 2 and all(ln.split(": ", 1)[1].strip() for ln in lines), "each job with a reason"
