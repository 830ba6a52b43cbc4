"""Issue 25, "nothing hidden": every skipped point is counted and named with its rule, rejection reasons read like
the TOML the user wrote (no Python reprs, each reason once), and the commands a new user runs first print no noise."""

from __future__ import annotations

from pathlib import Path

from helpers import CONF, dry_run, write_case

B300 = CONF / "system" / "slurm_b300_efa.toml"
LOCAL = CONF / "system" / "local_slurm.toml"
KIMI = ('name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2"\ntp = 8\npp = 8\nvp = 2\ngbs = 256\n')
ONE_TEST = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\n'
# The CPU refit of conf/test/refit_cpu_smoke.toml with a sweep of dst.ep; 4 ranks on the local Slurm (2 nodes).
REFIT = ('name = "case"\ndescription = "d"\ntest_template_name = "MBridgeRefit"\n[cmd_args]\nmodel = "tiny_moe"\n'
         'seq_length = 128\ndevice = "cpu"\ntransport = "gloo"\ndtype = "fp32"\nwarmup = 1\niterations = 3\n'
         '[cmd_args.src]\ntp = 2\nep = 2\n[cmd_args.dst]\ntp = 1\netp = 1\nep = [4, 8]\n')
ON_LOCAL = ONE_TEST.replace("32", "2")


def test_a_reason_shared_by_every_point_is_shown_once_without_python_reprs(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", KIMI + "ep = 7\nmbs = [1, 2]\n", ONE_TEST)
    res = dry_run(B300, scenario, tmp_path)
    assert res.returncode == 1, res.output
    (line,) = [ln for ln in res.output.splitlines() if "every point of its sweep is rejected" in ln]
    assert line.count("[experts-per-ep]") == 1 and "(2 of 2 points)" in line, line
    assert "||" not in line


def test_layout_values_read_as_toml_tables(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", REFIT, ON_LOCAL)
    res = dry_run(LOCAL, scenario, tmp_path)
    (line,) = [ln for ln in res.output.splitlines() if "rejected: [refit-layout]" in ln]
    assert "src={tp=2, pp=1, ep=2}, dst={tp=1, pp=1, ep=8, etp=1}, mode=\"collocated\", world_size=4" in line, line
    assert "None" not in line and "{'" not in line
