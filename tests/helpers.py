"""Shared test helpers (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


@dataclass
class CliResult:
    returncode: int
    output: str
    output_dir: Path


def reap(*procs: subprocess.Popen) -> None:
    """Kill what still runs of ``procs``, wait for them and close their pipes: a test that fails mid-way must not
    leave a child running, whose Popen would later fail an unrelated test with a ResourceWarning
    (filterwarnings = error)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """The real console entry point in a child process (CloudAI configures logging globally and calls exit)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(cwd / "debug.log"), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dry_run(system: Path, scenario: Path, tmp: Path, *extra: str, env: dict[str, str] | None = None) -> CliResult:
    out = tmp / "results"
    proc = run_cli(
        "dry-run",
        "--system-config",
        str(system),
        "--test-scenario",
        str(scenario),
        "--output-dir",
        str(out),
        *extra,
        cwd=tmp,
        env=env,
    )
    return CliResult(proc.returncode, proc.stdout + proc.stderr, out)


# Sentinel credentials a test puts in the environment; none may reach a generated file or the CLI's output.
SECRETS = {"HF_TOKEN": "hf_SENTINEL_7f3a9", "WANDB_API_KEY": "wandb_SENTINEL_c41d", "HUGGING_FACE_HUB_TOKEN": "hf2_S"}


def assert_no_secret_leaked(root: Path, output: str, expected_file: str) -> None:
    """No SECRETS value in any file under ``root`` (which must hold ``expected_file``) nor in ``output``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert any(p.name == expected_file for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS.values():
            assert secret.encode() not in data, f"{secret} leaked into {path}"
    assert not any(s in output for s in SECRETS.values())


def sbatch_scripts(results: Path) -> list[Path]:
    return sorted(results.rglob("cloudai_sbatch_script.sh"))


def normalize(text: str, output_dir: Path) -> str:
    """Golden-file placeholders, CloudAI style."""
    text = text.replace(str(output_dir), "__OUTPUT_DIR__")
    text = text.replace(f" {sys.executable} -m mbridge_payload.", " __PYTHON__ -m mbridge_payload.")
    text = re.sub(r"_\d{8}_\d{6}\b", "_<TIMESTAMP>", text)
    return re.sub(r"cloudai-mbridge \S+ with CloudAI \S+", "cloudai-mbridge <VERSION> with CloudAI <VERSION>", text)


def write_case(tmp: Path, test_toml: str, scenario_toml: str) -> tuple[Path, Path]:
    """A conf-like folder (test/ beside test_scenario/) so the CLI's --tests-dir default applies."""
    (tmp / "test").mkdir(parents=True, exist_ok=True)
    (tmp / "test_scenario").mkdir(parents=True, exist_ok=True)
    (tmp / "test" / "case.toml").write_text(test_toml)
    scenario = tmp / "test_scenario" / "case.toml"
    scenario.write_text(scenario_toml)
    return tmp / "test", scenario


def slurm_strategy(system_toml: Path, test_toml: Path, num_nodes: int, output: Path, overrides: dict | None = None):
    """Build the real CloudAI objects for one sweep point in-process (CloudAI's own golden-test style)."""
    import toml
    from cloudai.core import Registry, TestRun
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register

    register()
    system = Parser.parse_system(system_toml)
    system.supports_gpu_directives_cache = True  # no scontrol query: the example clusters have GPU gres
    data = toml.load(test_toml)
    data["cmd_args"].update(overrides or {})
    tdef = Registry().test_definitions_map[data["test_template_name"]].model_validate(data)
    output.mkdir(parents=True, exist_ok=True)
    tr = TestRun(name=tdef.name, test=tdef, num_nodes=num_nodes, nodes=[], output_path=output, time_limit="01:00:00")
    return Registry().get_command_gen_strategy(type(system), type(tdef))(system, tr)
