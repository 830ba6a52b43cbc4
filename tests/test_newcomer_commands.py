"""Issue 32, newcomer: the README's own commands succeed as written on the shipped files, and their messages point
to commands that work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import CONF, run_cli

SYSTEMS = sorted((CONF / "system").glob("*.toml"))


@pytest.mark.parametrize("system", SYSTEMS, ids=[p.stem for p in SYSTEMS])
def test_verify_configs_of_the_conf_folder_passes_on_every_shipped_system(system: Path, tmp_path: Path) -> None:
    """`verify-configs conf/ --system-config <system>` (the README's command): the scenarios sized for other systems
    are skipped with one line each, not errors; at least one scenario is checked for real."""
    proc = run_cli("verify-configs", str(CONF), "--system-config", str(system), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "[ERROR]" not in out and "Traceback" not in out
    assert "scenario(s) pass dry-run's checks on" in out
    for line in out.splitlines():
        if "verify-configs: skipped" in line:  # says why, with the rule
            assert ("not for this system" in line or "rules named in expected_rejections" in line) and "[" in line


def test_verify_configs_of_a_folder_reads_its_test_folder_once_for_all_scenarios(tmp_path: Path, monkeypatch) -> None:
    """dry-run's checks of every scenario in a folder (what `verify-configs conf/ --system-config` runs after CloudAI's
    own pass) parse the test folder once, not once per scenario (conf/: 39 scenarios x 80 test TOMLs, 10 of the
    command's 27 s of CPU on local_slurm), and still check each scenario."""
    from cloudai.test_parser import TestParser

    from cloudai_mbridge.cli.commands import config_kinds, scenario_checks
    from cloudai_mbridge.cli.session import session

    conf = tmp_path / "conf"
    shutil.copytree(CONF / "test", conf / "test")
    (conf / "test_scenario").mkdir()
    for name in ("refit_cpu_smoke.toml", "refit_cpu_expected_rejection.toml", "nvidia_dsv3_h100.toml"):
        shutil.copy(CONF / "test_scenario" / name, conf / "test_scenario" / name)
    folder_reads = []
    parse_all = TestParser.parse_all

    def counting(self: TestParser) -> list:
        if len(self.test_tomls) > 1:
            folder_reads.append(len(self.test_tomls))
        return parse_all(self)

    monkeypatch.setattr(TestParser, "parse_all", counting)
    kinds = config_kinds(conf)
    skipped: list[str] = []
    with session("dry-run"):
        problems = scenario_checks(conf, kinds, conf / "test", CONF / "system" / "local_slurm.toml", skipped, [])
    # the two CPU scenarios checked and passed, the H100 one skipped as meant for another system
    assert problems == [] and len(skipped) == 1, (problems, skipped)
    assert skipped[0].startswith("nvidia_dsv3_h100.toml: not for this system"), skipped
    assert folder_reads == [len(list((conf / "test").glob("*.toml")))], folder_reads


def test_a_scenario_named_alone_on_a_system_it_does_not_fit_is_still_an_error(tmp_path: Path) -> None:
    proc = run_cli("verify-configs", str(CONF / "test_scenario" / "nvidia_dsv3_gb300.toml"), "--system-config",
                   str(CONF / "system" / "slurm_h100_ib.toml"), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "[memory]" in out and "skipped" not in out


def test_every_system_fit_rule_is_a_rule_that_exists() -> None:
    """verify-configs treats a scenario refused only by these rules as meant for another system: a rule renamed or
    removed would silently turn its refusals into errors on every system (or a typo here would never match)."""
    from cloudai_mbridge.cli.commands import SYSTEM_FIT_RULES
    from cloudai_mbridge.rules.dispatch_bench import DISPATCH_BENCH_RULES
    from cloudai_mbridge.rules.refit import REFIT_RULES
    from cloudai_mbridge.workloads.training.test_definition import TRAINING_RULE_IDS

    standalone = (Path(__file__).parent.parent / "cloudai_mbridge/workloads/training/standalone.py").read_text()
    known = {*TRAINING_RULE_IDS, *REFIT_RULES.rules, *DISPATCH_BENCH_RULES}
    if '"standalone-one-node"' in standalone:
        known.add("standalone-one-node")
    base = (Path(__file__).parent.parent / "cloudai_mbridge/workloads/base.py").read_text()
    if 'Violation("system-kind"' in base:  # MBridgeTestDefinition.system_kind_violations, every test kind's
        known.add("system-kind")
    assert known >= SYSTEM_FIT_RULES, sorted(SYSTEM_FIT_RULES - known)


def test_a_broken_scenario_in_the_folder_is_an_error_not_skipped(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "test_scenario" / "broken.toml").write_text(
        'name = "broken"\n[[Tests]]\nid = "x"\ntest_name = "no_such_test"\nnum_nodes = 2\n')
    proc = run_cli("verify-configs", str(conf), "--system-config", str(conf / "system" / "local_slurm.toml"),
                   cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]  # a scenario that cannot be read (cli/exits.py)
    assert "broken.toml" in out and "[ERROR]" in out


def test_a_refused_dry_run_names_a_verify_configs_command_that_checks_that_scenario(tmp_path: Path) -> None:
    """The Fix: line of a dry-run that cannot read its files names the user's own scenario and system, and that
    command, run as printed, finds the same problem."""
    shutil.copytree(CONF / "test", tmp_path / "test")
    (tmp_path / "test_scenario").mkdir()
    scenario = tmp_path / "test_scenario" / "broken.toml"
    scenario.write_text('name = "broken"\n[[Tests]]\nid = "x"\ntest_name = "no_such_test"\nnum_nodes = 2\n')
    system = CONF / "system" / "local_slurm.toml"
    proc = run_cli("dry-run", "--system-config", str(system), "--test-scenario", str(scenario), "--output-dir",
                   str(tmp_path / "results"), cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"`cloudai-mbridge verify-configs {scenario} --system-config {system}`" in out, out[-2000:]
    check = run_cli("verify-configs", str(scenario), "--system-config", str(system), cwd=tmp_path)
    assert check.returncode == 2  # as the dry-run: a file that cannot be read
    assert "no_such_test" in check.stdout + check.stderr


TYPOS = [  # (where, the line written in, what the message must say)
    ("test", ("transport = \"gloo\"", "transprt = \"gloo\""),
     "'cmd_args.transprt' = \"gloo\" is not a field of the MBridgeRefit test; did you mean 'transport'?"),
    ("test", ("transport = \"gloo\"", "transport = \"glo\""),
     "'cmd_args.transport' = \"glo\" is not one of \"gloo\", \"nccl\", \"nvshmem\", \"nixl\"; did you mean \"gloo\"?"),
    ("test", ("timeout_s = 300", "timeout_s = 300\nverfy = false"),  # the value as TOML writes it, not Python's False
     "'cmd_args.verfy' = false is not a field of the MBridgeRefit test; did you mean 'verify'?"),
    ("scenario", ("num_nodes = 2", "num_node = 2"),
     "'Tests.num_node' = 2 is not a field of the test scenario; did you mean 'num_nodes'?"),
]


def _typo_case(tmp: Path, where: str, change: tuple[str, str]) -> tuple[Path, Path]:
    conf = tmp / "conf"
    shutil.copytree(CONF / "test", conf / "test")
    (conf / "test_scenario").mkdir()
    scenario = conf / "test_scenario" / "refit_cpu_smoke.toml"
    shutil.copy(CONF / "test_scenario" / "refit_cpu_smoke.toml", scenario)
    target = scenario if where == "scenario" else conf / "test" / "refit_cpu_smoke.toml"
    text = target.read_text()
    assert change[0] in text
    target.write_text(text.replace(change[0], change[1], 1))
    return conf, scenario


@pytest.mark.parametrize(("where", "change", "said"), TYPOS, ids=["field", "value", "bool-field", "scenario-field"])
def test_a_typo_gets_did_you_mean_and_the_same_exit_status_from_every_command(
        tmp_path: Path, where: str, change: tuple[str, str], said: str) -> None:
    conf, scenario = _typo_case(tmp_path, where, change)
    system = CONF / "system" / "local_slurm.toml"
    scenario_args = ("--system-config", str(system), "--test-scenario", str(scenario))
    runs = {
        "dry-run": run_cli("dry-run", *scenario_args, "--output-dir", str(tmp_path / "results"), cwd=tmp_path),
        "preflight": run_cli("preflight", *scenario_args, "--output-dir", str(tmp_path / "pf"), cwd=tmp_path),
        "verify-configs": run_cli("verify-configs", str(conf), "--system-config", str(system), cwd=tmp_path),
    }
    for verb, proc in runs.items():
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, f"{verb}: {proc.returncode}\n{out[-2000:]}"
        assert said in out, f"{verb}:\n{out[-2000:]}"
        assert "Extra inputs are not permitted" not in out and "literal[" not in out.lower(), out
        assert "Traceback" not in out
    assert not (tmp_path / "results").exists() and not (tmp_path / "pf").exists()


def test_a_test_the_scenario_does_not_define_gets_the_same_exit_status_from_dry_run_and_preflight(
        tmp_path: Path) -> None:
    shutil.copytree(CONF / "test", tmp_path / "test")
    (tmp_path / "test_scenario").mkdir()
    scenario = tmp_path / "test_scenario" / "broken.toml"
    scenario.write_text('name = "broken"\n[[Tests]]\nid = "x"\ntest_name = "no_such_test"\nnum_nodes = 2\n')
    args = ("--system-config", str(CONF / "system" / "local_slurm.toml"), "--test-scenario", str(scenario))
    codes = {verb: run_cli(verb, *args, cwd=tmp_path).returncode for verb in ("dry-run", "preflight")}
    assert codes == {"dry-run": 2, "preflight": 2}


def test_help_lists_the_exit_statuses(tmp_path: Path) -> None:
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "Exit status: 0 done; 1 the checks refused" in text and "2 an input could not be read" in text


def test_the_quick_starts_preflight_and_the_readmes_write_different_folders() -> None:
    """scripts/quickstart.sh --dry-run's preflight and the README's preflight of another scenario used to share
    results/preflight/, each overwriting the other's page."""
    import re
    import subprocess

    from helpers import ROOT

    script = (ROOT / "scripts" / "quickstart.sh").read_text()
    (assign,) = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("PREFLIGHT_OUT=")]
    folder = subprocess.run(["bash", "-c", f'OUT=results SCENARIO={CONF / "test_scenario" / "refit_cpu_smoke.toml"}; '
                             f'{assign}; echo "$PREFLIGHT_OUT"'], capture_output=True, text=True, check=True)
    quick = folder.stdout.strip()
    assert '--output-dir "$PREFLIGHT_OUT"' in script
    readme = " ".join((ROOT / "README.md").read_text().replace("\\\n", " ").split())
    readme_dirs = re.findall(r"cloudai-mbridge preflight [^`]*?--output-dir (\S+)", readme)
    assert readme_dirs and quick not in readme_dirs, (quick, readme_dirs)


def _python_without_cloudai() -> str:
    import subprocess

    for candidate in ("python3", "/usr/bin/python3"):
        path = shutil.which(candidate)
        if path and subprocess.run([path, "-c", "import cloudai"], capture_output=True).returncode != 0:
            return path
    pytest.skip("no Python without CloudAI on this machine")


def test_outside_the_venv_the_demo_and_the_cli_say_what_to_install_in_one_line(tmp_path: Path) -> None:
    """The README's `python3 -m cloudai_mbridge.reports.demo ...` with a Python that lacks CloudAI: one line, the
    install command with CloudAI's commit as it must be typed (a 40-hex commit is not a secret), nothing written."""
    import os
    import subprocess

    from helpers import ROOT

    from cloudai_mbridge._cloudai import TESTED_COMMIT

    python = _python_without_cloudai()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out_dir = tmp_path / "demo"
    for argv in (["-m", "cloudai_mbridge.reports.demo", "--output-dir", str(out_dir)],
                 ["-m", "cloudai_mbridge", "dry-run", "--system-config", str(CONF / "system" / "local_slurm.toml")]):
        proc = subprocess.run([python, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 2, lines
        assert len(lines) == 1 and "CloudAI is not installed" in lines[0], lines
        assert f"git+https://github.com/NVIDIA/cloudai.git@{TESTED_COMMIT}'" in lines[0], lines
    assert not out_dir.exists()


def test_a_bare_40_hex_value_is_still_redacted_but_a_commit_is_shown() -> None:
    from cloudai_mbridge.redact import REDACTED, redact

    key = "9f1c2ab7e44d0b6358c1f2a9e07d5b34c6a8e912"
    assert REDACTED in redact(f"wandb login {key}") and REDACTED in redact(f"value={key}.")
    assert redact(f"pip install 'x @ git+https://h/x.git@{key}'").endswith(f"@{key}'")
    assert redact(f"at commit {key}") == f"at commit {key}"
