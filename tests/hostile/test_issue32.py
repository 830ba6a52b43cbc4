"""Issue 32 through the real CLI: a secret in a run's log never reaches a report file, and a pathologically long name
or description is handled in seconds (the redaction used to backtrack for minutes on them).

The FIFO / device / oversized files in config and results paths are rows of cases.py (class "unreadable files")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import toml
from helpers import CONF, run_cli

from cloudai_mbridge.redact import REDACTED
from hostile.cases import AWS, HF, WANDB

AKIA = "AKIAQ7ZXW3RT5YUV2MNB"
# (rank, line): one failure line per rank, each of another kind so each is its rank's first finding; the HF token
# sits past the 160 characters a report cell keeps of a line, so a cut before the redaction would leave its head
LINES = {
    0: "RuntimeError: hub download failed (" + "x" * 150 + f") for token {HF} (401)",
    1: f"torch.distributed.DistBackendError: NCCL error while reading s3 with AWS_SECRET_ACCESS_KEY={AWS} set",
    2: f"Segmentation fault (core dumped) in the s3 client for access key {AKIA}",
    3: f"ValueError: wandb login failed with API key {WANDB}",
}
SECRETS = (HF, AWS, AKIA, WANDB)


def _report_files(root: Path) -> list[Path]:
    """What generate-report writes (the run logs and configs are the run's own inputs, left as they are)."""
    return [p for p in root.rglob("*") if p.is_file() and p.parent.name != "logs" and p.suffix != ".log"
            and p.name not in ("mbridge_config.json", "test-run.toml", "cloudai_sbatch_script.sh")]


def _leaks(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        data = path.read_bytes()
        # the whole secret, or its first 14 characters (a cell that cut a token it had not redacted first)
        found += [f"{path.name}: {s[:14]}..." for s in SECRETS if s[:14].encode() in data]
    return found


def _plant(run: Path) -> None:
    for rank, line in LINES.items():
        log = run / "logs" / f"rank-{rank}.log"
        if log.is_file():
            with log.open("a") as fh:
                fh.write(line + "\n")


def test_secrets_in_a_training_log_never_reach_the_ab_report_files(tmp_path: Path) -> None:
    from test_reports import build_ab_results

    root, _ = build_ab_results(tmp_path)
    runs = {}
    for cfg in root.rglob("mbridge_config.json"):
        c = json.loads(cfg.read_text())
        runs[(c["mbs"], c["dispatcher"])] = cfg.parent
    target = runs[(1, "deepep")]
    _plant(target)
    assert any(s in (target / "logs" / "rank-0.log").read_text() for s in SECRETS)
    scenario = next((tmp_path / "test_scenario").glob("*.toml"))
    proc = run_cli("generate-report", "--system-config", str(CONF / "system" / "slurm_h100_ib.toml"),
                   "--test-scenario", str(scenario), "--result-dir", str(root), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    files = _report_files(root)
    names = {p.name for p in files}
    assert {"mbridge_ab.csv", "mbridge_runs.csv", "mbridge_ab.html", "mbridge_summary.json"} <= names, names
    assert _leaks(files) == []
    assert not [s for s in SECRETS if s in output]
    # the failure is still reported, with the secret replaced
    summary = (target / "mbridge_summary.json").read_text()
    assert REDACTED in summary and "RuntimeError" in summary
    runs_csv = (root / "mbridge_runs.csv").read_text() + (root / "mbridge_ab.csv").read_text()
    assert "RuntimeError" in runs_csv or "Segmentation" in runs_csv or REDACTED in runs_csv


def test_secrets_in_a_refit_log_never_reach_the_refit_report_files(tmp_path: Path) -> None:
    from helpers import dry_run

    from hostile.test_damaged_refit import SCENARIO, SYSTEM, TIMES, _runs, payload_logs

    res = dry_run(SYSTEM, SCENARIO, tmp_path)
    assert res.returncode == 0, res.output
    root = next(res.output_dir.iterdir())
    runs = _runs(root)
    for name, run in runs.items():
        payload_logs(run, TIMES[name])
    _plant(runs["TP1·EP4"])
    proc = run_cli("generate-report", "--system-config", str(SYSTEM), "--test-scenario", str(SCENARIO),
                   "--result-dir", str(root), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    files = _report_files(root)
    names = {p.name for p in files}
    assert {"mbridge_refit.csv", "mbridge_refit.html", "mbridge_summary.json"} <= names, names
    assert _leaks(files) == []
    assert REDACTED in (runs["TP1·EP4"] / "mbridge_summary.json").read_text()


@pytest.mark.parametrize("field", ["name", "description"])
def test_a_pathologically_long_test_name_or_description_takes_seconds(tmp_path: Path, field: str) -> None:
    """300,000 characters: a backtracking redaction took minutes (100,000 took 30-60 s); linear takes seconds. The
    limit is a guard against that blow-up, not a benchmark."""
    test = toml.load(CONF / "test" / "kimi_k2_sft.toml")
    scenario = toml.load(CONF / "test_scenario" / "kimi_k2_sft.toml")
    if field == "name":
        test["name"] = "n" * 300_000
        for t in scenario["Tests"]:
            t["test_name"] = test["name"]
    else:
        test["description"] = "ab-" * 100_000
    (tmp_path / "conf" / "test").mkdir(parents=True)
    (tmp_path / "conf" / "test_scenario").mkdir()
    (tmp_path / "conf" / "test" / "t.toml").write_text(toml.dumps(test))
    (tmp_path / "conf" / "test_scenario" / "s.toml").write_text(toml.dumps(scenario))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(tmp_path / "debug.log"), "dry-run",
             "--system-config", str(CONF / "system" / "slurm_b300_efa.toml"), "--test-scenario",
             str(tmp_path / "conf" / "test_scenario" / "s.toml"), "--output-dir", str(tmp_path / "out")],
            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dry-run with a {field} of 300,000 characters ran past 120 s")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    shutil.rmtree(tmp_path / "out")
