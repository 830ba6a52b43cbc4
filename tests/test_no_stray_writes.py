"""Nothing is written outside the output folder, by every CLI verb, through the real CLI from a fresh working folder
(the shipped system files name ``install_path = "./install"``, relative to it).

Before the fix a dry-run created ``./install/huggingface`` in the working folder: CloudAI's installation check
(``_check_installation`` -> ``prepare_output_dir``) runs in dry-run too (session.replace_check_installation).
The log goes where --log-file says (here a folder of its own), so what the verb itself writes is what is checked;
HOME is a folder of the test, so a ``~/.cache`` or ``~/.kube`` written behind the command's back shows too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONF, write_case

B300 = CONF / "system" / "slurm_b300_efa.toml"
REJECTED_TEST = (
    'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
    'model = "kimi_k2"\ngpu = "b300"\ntp = 8\npp = 8\nvp = 2\nep = 7\ngbs = 256\ntrain_iters = 24\n'
)
REJECTED_SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\n'


def _everything(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _cli(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[Path]]:
    """Runs ``cloudai-mbridge ARGS`` from ``tmp/cwd`` (empty) with HOME ``tmp/home`` (empty); returns the process and
    every file or folder it created under ``tmp`` outside ``tmp/out`` and the log folder."""
    cwd, home, logs = tmp / "cwd", tmp / "home", tmp / "logs"
    for d in (cwd, home, logs):
        d.mkdir(parents=True, exist_ok=True)
    before = _everything(tmp)
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(tmp / "no-such-kubeconfig")}
    env.pop("XDG_CACHE_HOME", None)
    proc = subprocess.run([sys.executable, "-m", "cloudai_mbridge", "--log-file", str(logs / "debug.log"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    out = tmp / "out"
    stray = {p for p in _everything(tmp) - before if p != out and out not in p.parents and logs not in p.parents}
    return proc, stray


@pytest.mark.parametrize(
    ("system", "scenario"),
    [
        ("slurm_b300_efa.toml", "kimi_k2_dispatcher_ab.toml"),  # the README's dry-run
        ("local_slurm.toml", "refit_cpu_smoke.toml"),
        ("k8s_generic.toml", "dsv3_dispatcher_ab.toml"),
        ("standalone_4gpu.toml", "bridge_ab_4gpu.toml"),
    ],
)
def test_dry_run_writes_nothing_outside_the_output_folder(tmp_path: Path, system: str, scenario: str) -> None:
    proc, stray = _cli(tmp_path, "dry-run", "--system-config", str(CONF / "system" / system), "--test-scenario",
                       str(CONF / "test_scenario" / scenario), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: a point a rule skips on this system
    assert "job(s) written" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert sorted(map(str, stray)) == [], "dry-run wrote outside --output-dir (an install folder, a cache, ...)"


def test_preflight_writes_nothing_outside_the_output_folder(tmp_path: Path) -> None:
    proc, stray = _cli(tmp_path, "preflight", "--system-config", str(B300), "--test-scenario",
                       str(CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml"),
                       "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(map(str, stray)) == []


def test_verify_configs_writes_nothing(tmp_path: Path) -> None:
    proc, stray = _cli(tmp_path, "verify-configs", str(CONF))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(map(str, stray)) == []


def test_a_refused_run_writes_nothing_outside_the_output_folder(tmp_path: Path) -> None:
    """A run refused before anything runs creates no install folder either (a run that goes ahead installs into the
    system file's install_path, relative to the working folder: docs/cli.md)."""
    _, scenario = write_case(tmp_path / "conf", REJECTED_TEST, REJECTED_SCENARIO)
    proc, stray = _cli(tmp_path, "run", "--system-config", str(B300), "--test-scenario", str(scenario),
                       "--output-dir", str(tmp_path / "out"))
    assert proc.returncode != 0 and "experts-per-ep" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert sorted(map(str, stray)) == []
