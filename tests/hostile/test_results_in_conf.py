"""Issue 46 (6): results folders inside the configuration tree. A dry-run written into conf/ (--output-dir
conf/results) left TOMLs (test-run.toml, slurm-job.toml) that ``verify-configs conf/`` then failed on. Chosen: results
folders are recognised by CloudAI's own marker (every run's folder holds test-run.toml) and skipped by
verify-configs, one line saying which folder and how many runs; an output folder inside conf/ stays allowed."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import CONF, run_cli

from cloudai_mbridge.cli.config_files import RUN_MARKER, config_tomls


def _conf(tmp: Path) -> Path:
    conf = tmp / "conf"
    for kind, name in (("system", "local_slurm"), ("test", "refit_cpu_smoke"), ("test_scenario", "refit_cpu_smoke")):
        (conf / kind).mkdir(parents=True)
        shutil.copy(CONF / kind / f"{name}.toml", conf / kind)
    return conf


def test_results_folders_are_told_apart_from_configuration(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    run = conf / "results" / "s_2026-01-01_00-00-00" / "t" / "0"
    run.mkdir(parents=True)
    (run / RUN_MARKER).write_text('name = "t"\n')
    (run / "slurm-job.toml").write_text("job_id = 1\n")
    (run / "sub").mkdir()
    (run / "sub" / "x.toml").write_text("a = 1\n")
    kept, skipped = config_tomls(conf)
    assert sorted(p.relative_to(conf).as_posix() for p in kept) == [
        "system/local_slurm.toml", "test/refit_cpu_smoke.toml", "test_scenario/refit_cpu_smoke.toml"]
    assert skipped == {conf / "results": 1}
    assert config_tomls(run) == ([], {run: 1}), "a run folder named itself is results too"


def test_verify_configs_passes_after_a_dry_run_into_conf(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    dry = run_cli("dry-run", "--system-config", str(conf / "system" / "local_slurm.toml"), "--tests-dir",
                  str(conf / "test"), "--test-scenario", str(conf / "test_scenario" / "refit_cpu_smoke.toml"),
                  "--output-dir", str(conf / "results"), cwd=tmp_path)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert list((conf / "results").rglob(RUN_MARKER)), "the dry-run wrote its runs into conf/results"
    res = run_cli("verify-configs", str(conf), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert f"skipped {conf / 'results'}: results of " in out, out[-3000:]
    assert "test-run.toml' TestTemplate" not in out and "slurm-job.toml: not a" not in out
