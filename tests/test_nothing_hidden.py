"""Issue 25, "nothing hidden": every skipped point is counted and named with its rule, rejection reasons read like
the TOML the user wrote (no Python reprs, each reason once), and the commands a new user runs first print no noise."""

from __future__ import annotations

from pathlib import Path

from helpers import CONF, dry_run, run_cli, write_case

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


def _good_refit_logs(run: Path) -> None:
    """Rank logs of a verified refit, as the payload prints them for this run's config (its run id and digest)."""
    from hostile.test_damaged_refit import payload_logs

    payload_logs(run, [45.61, 44.87, 45.21])


def test_dry_run_counts_a_declared_rejection_as_expected(tmp_path: Path) -> None:
    res = dry_run(LOCAL, CONF / "test_scenario" / "refit_cpu_expected_rejection.toml", tmp_path)
    assert res.returncode == 0, res.output
    assert "dry-run: 2 point(s): 1 job(s) written, 1 skipped by a rule:" in res.output
    assert ("skipped, as the test declares (expected_rejections): refit_cpu_expected_rejection point 2 (dst.ep=8): "
            "[refit-layout] dst: expert grid") in res.output
    assert "[ERROR]" not in res.output and "[WARNING]" not in res.output, res.output


def test_dry_run_warns_that_run_will_fail_on_an_undeclared_rejection(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", REFIT, ON_LOCAL)
    res = dry_run(LOCAL, scenario, tmp_path)
    assert res.returncode == 0, res.output
    assert "dry-run: 2 point(s): 1 job(s) written, 1 skipped by a rule:" in res.output
    assert "[WARNING]   skipped, NOT declared in expected_rejections: case point 2 (dst.ep=8): [refit-layout]" \
        in res.output
    assert "`run` will exit 1" in res.output and 'expected_rejections = "<rule>"' in res.output


def _session_after_run(tmp_path: Path, expected: bool):
    from cloudai_mbridge.cli.session import Session
    from cloudai_mbridge.rules import Violation
    from cloudai_mbridge.rules.sweep import PointResult, PreflightReport

    _, scenario = write_case(tmp_path / "conf", REFIT, ON_LOCAL)
    res = dry_run(LOCAL, scenario, tmp_path)
    (root,) = list(res.output_dir.iterdir())
    (run,) = [p.parent for p in root.rglob("mbridge_config.json")]
    _good_refit_logs(run)
    skipped = PointResult("case", 2, {"dst.ep": 8}, [Violation("refit-layout", {}, "8 ranks needed", "fewer")], None,
                          expected=expected)
    ran = PointResult("case", 1, {"dst.ep": 4}, [], 4)
    return Session("run", scenario_roots=[root], report=PreflightReport("case", "local", [ran, skipped]))


def test_run_exits_1_when_a_rule_skipped_a_point_the_test_does_not_declare(tmp_path: Path, caplog) -> None:
    import logging

    from cloudai_mbridge.cli.session import finish_run

    with caplog.at_level(logging.INFO):
        assert finish_run(_session_after_run(tmp_path, expected=False), 0) == 1
    assert "run: 2 point(s): 1 job(s) ran (1 passed, 0 failed), 1 skipped by a rule:" in caplog.text
    assert "skipped, NOT declared in expected_rejections: case point 2 (dst.ep=8): [refit-layout]" in caplog.text
    assert "run: 1 point(s) skipped by a rule that the scenario does not declare: it exits 1" in caplog.text


def test_run_exits_0_when_the_test_declares_the_rejection(tmp_path: Path, caplog) -> None:
    import logging

    from cloudai_mbridge.cli.session import finish_run

    with caplog.at_level(logging.INFO):
        assert finish_run(_session_after_run(tmp_path, expected=True), 0) == 0
    assert "1 job(s) ran (1 passed, 0 failed), 1 skipped by a rule:" in caplog.text
    assert "skipped, as the test declares (expected_rejections): case point 2" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_expected_rejections_must_name_a_rule_of_the_workload(tmp_path: Path) -> None:
    for value, said in (('"refit-layot"', "expected_rejections names no rule of MBridgeRefit: refit-layot"),
                        ('["refit-layout"]', 'Fix: write expected_rejections = "refit-layout"')):
        _, scenario = write_case(tmp_path / "conf", REFIT.replace("[cmd_args]\n", f"[cmd_args]\nexpected_rejections "
                                                                  f"= {value}\n"), ON_LOCAL)
        res = dry_run(LOCAL, scenario, tmp_path)
        assert res.returncode != 0 and said in res.output, res.output
        assert "Traceback" not in res.output and not res.output_dir.exists()


def test_the_quick_start_has_no_rejected_point(tmp_path: Path) -> None:
    res = dry_run(LOCAL, CONF / "test_scenario" / "refit_cpu_smoke.toml", tmp_path)
    assert res.returncode == 0, res.output
    assert "dry-run: 4 point(s): 4 job(s) written, 0 skipped by a rule" in res.output
    assert "rejected" not in res.output


def _generate_report(tmp: Path, system: Path, scenario: Path, root: Path) -> None:
    proc = run_cli("generate-report", "--system-config", str(system), "--test-scenario", str(scenario),
                   "--result-dir", str(root), cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_refit_report_lists_the_skipped_point_and_its_rule(tmp_path: Path) -> None:
    scenario = CONF / "test_scenario" / "refit_cpu_expected_rejection.toml"
    res = dry_run(LOCAL, scenario, tmp_path)
    (root,) = list(res.output_dir.iterdir())
    (run,) = [p.parent for p in root.rglob("mbridge_config.json")]
    _good_refit_logs(run)
    _generate_report(tmp_path, LOCAL, scenario, root)
    page = (root / "mbridge_refit.html").read_text()
    skipped = page[page.index("<h2>Skipped points</h2>"):]
    assert "1 sweep point(s) skipped" in skipped
    for cell in ("refit_cpu_expected_rejection", "dst.ep=8", "refit-layout", "dst: expert grid etp*ep=1*8=8"):
        assert f">{cell}" in skipped, cell
    assert "<td class='text short'>yes</td>" in skipped, "declared in expected_rejections"


def test_ab_report_lists_the_skipped_point_and_its_rule(tmp_path: Path) -> None:
    import json

    from test_reports import AB_TEST, SCENARIO, fake_run

    h100 = CONF / "system" / "slurm_h100_ib.toml"
    _, scenario = write_case(tmp_path, AB_TEST.replace("mbs = [1, 2]", "mbs = 1").replace("ep = 8", "ep = [8, 7]"),
                             SCENARIO)
    res = dry_run(h100, scenario, tmp_path)
    assert res.returncode == 0, res.output
    (root,) = list(res.output_dir.iterdir())
    for config in root.rglob("mbridge_config.json"):
        built = "flex" if json.loads(config.read_text())["dispatcher"] == "deepep" else "alltoall"
        fake_run(config.parent, [6000] * 12, [11.0 - 0.1 * i for i in range(12)], built)
    _generate_report(tmp_path, h100, scenario, root)
    page = (root / "mbridge_ab.html").read_text()
    skipped = page[page.index("<h2>Skipped points</h2>"):]
    assert "2 sweep point(s) skipped" in skipped
    assert skipped.count("; experts-per-ep</td>") == 2 and ">ep=7 dispatcher=alltoall<" in skipped
    assert "<td class='text short'>no</td>" in skipped, "not declared"


def test_a_report_says_when_no_point_was_skipped(tmp_path: Path) -> None:
    scenario = CONF / "test_scenario" / "refit_cpu_smoke.toml"
    res = dry_run(LOCAL, scenario, tmp_path)
    (root,) = list(res.output_dir.iterdir())
    _good_refit_logs(sorted(p.parent for p in root.rglob("mbridge_config.json"))[0])
    _generate_report(tmp_path, LOCAL, scenario, root)
    assert "None: every sweep point passed the rules" in (root / "mbridge_refit.html").read_text()


def test_verify_configs_and_list_print_no_noise(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = run_cli("verify-configs", str(CONF), cwd=tmp_path, env={"HOME": str(home), "KUBECONFIG": ""})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"scenarios checked against the tests in {CONF / 'test'}" in out
    assert "Test configuration directory not provided" not in out and "Kube config" not in out, out
    assert list(home.iterdir()) == [], "nothing written into HOME"
    proc = run_cli("list", cwd=tmp_path)
    assert '"MBridgeRefit" Megatron-Core refit benchmark.' in proc.stdout and "``" not in proc.stdout


def test_generate_report_needs_only_the_results_folder_that_run_made(tmp_path: Path) -> None:
    from cloudai_mbridge.cli.session import save_inputs

    scenario = CONF / "test_scenario" / "refit_cpu_smoke.toml"
    res = dry_run(LOCAL, scenario, tmp_path)
    (root,) = list(res.output_dir.iterdir())
    _good_refit_logs(sorted(p.parent for p in root.rglob("mbridge_config.json"))[0])
    proc = run_cli("generate-report", "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 2, "a dry-run keeps no inputs"
    assert "holds no mbridge_inputs/" in proc.stdout and "Fix: pass --system-config and --test-scenario" in \
        proc.stdout, proc.stdout + proc.stderr
    assert not (root / "mbridge_refit.html").exists()

    save_inputs(root, LOCAL, scenario, CONF / "test")  # what `run` does once the results folder exists
    kept = sorted(str(p.relative_to(root / "mbridge_inputs")) for p in (root / "mbridge_inputs").rglob("*.toml"))
    assert kept == ["system/local_slurm.toml", "test/refit_cpu_smoke.toml", "test_scenario/refit_cpu_smoke.toml"]
    proc = run_cli("generate-report", "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(kept by the run)" in proc.stdout and (root / "mbridge_refit.html").is_file()
