"""Environment variable names a TOML may not set (launch/envnames.py): bash's read-only and self-set variables, those
that change how bash runs the job script, and those the launch sets for the payload; one check for the Slurm and
standalone scripts and the Kubernetes pods. The CLI rows are in tests/hostile/cases.py (class "reserved env names")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cloudai_mbridge.launch.envnames import reserved_env_name
from cloudai_mbridge.launch.kubernetes import K8sConfigError, K8sJobSpec, PodStep, render_objects
from cloudai_mbridge.launch.shell import SbatchFieldError, env_exports
from cloudai_mbridge.launch.slurm import SbatchSpec, SrunStep, render_sbatch

REFUSED = ["UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO", "BASH_ENV", "ENV", "IFS", "PS4",
           "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "EXECIGNORE", "POSIXLY_CORRECT", "BASH_XTRACEFD", "BASH_ANYTHING",
           "RANDOM", "SECONDS", "LINENO", "GROUPS", "FUNCNAME", "PWD", "OLDPWD", "PYTHONHOME", "MASTER_ADDR"]
ALLOWED = ["PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "HOME", "SHELL", "HOSTNAME", "LANG", "MASTER_PORT",
           "NCCL_DEBUG", "uid", "BASHFUL", "MY_BASH_ENV"]


def k8s_spec(env: dict[str, str]) -> K8sJobSpec:
    return K8sJobSpec(name="t-0-abcdef12", namespace="ns", image="img:1", num_nodes=2, nproc_per_node=8,
                      gpus_per_node=8, steps=(PodStep("train", ("python3", "-m", "mbridge_payload.train")),),
                      payload_files={"__init__.py": ""}, config_text="{}\n", env=env)


def _spec(out: Path, env: dict[str, str]) -> SbatchSpec:
    step = SrunStep(name="train", argv=("python3", "-c", "pass"), num_nodes=1, ntasks_per_node=1,
                    log_name="rank-%t.log")
    return SbatchSpec(job_name="j", output_dir=out, num_nodes=1, steps=(step,), env=env)


def test_every_variable_bash_makes_read_only_is_refused() -> None:
    """The class, from bash itself: whatever `readonly -p` lists in a fresh bash is refused."""
    listed = subprocess.run(["bash", "--norc", "-c", "readonly -p"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    names = re.findall(r"^declare -\w+ (\w+)", listed, re.M)
    assert {"UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO"} <= set(names)
    assert [n for n in names if reserved_env_name(n) is None] == []


@pytest.mark.parametrize("name", REFUSED)
def test_reserved_names_are_refused_with_the_name_and_a_fix(name: str) -> None:
    why, fix = reserved_env_name(name)
    assert name in why and name in fix and fix.startswith("remove")
    with pytest.raises(SbatchFieldError, match=rf"{name}.*Fix: remove {name}"):
        env_exports({name: "1"})
    with pytest.raises(K8sConfigError, match=rf"{name}.*Fix: remove {name}"):
        render_objects(k8s_spec(env={name: "1"}))


@pytest.mark.parametrize("name", ALLOWED)
def test_allowed_names_reach_a_script_that_runs(tmp_path: Path, name: str) -> None:
    assert reserved_env_name(name) is None
    value = "/usr/bin:/bin" if name == "PATH" else "/x/y"
    (line,) = env_exports({name: value})
    ran = subprocess.run(["bash", "-c", f"set -euo pipefail; {line}; printf %s \"${name}\""], capture_output=True,
                         text=True)
    assert (ran.returncode, ran.stdout) == (0, value), ran.stderr


@pytest.mark.parametrize("name", ["UID", "SHELLOPTS", "BASH_VERSINFO"])
def test_what_a_read_only_name_would_do_to_the_script(name: str) -> None:
    """Why they are refused: the job script stops at the export."""
    ran = subprocess.run(["bash", "-c", f"set -euo pipefail; export {name}=1; echo started"], capture_output=True,
                         text=True)
    assert ran.returncode != 0 and "readonly variable" in ran.stderr and "started" not in ran.stdout


def test_a_pythonpath_of_the_file_is_kept_behind_the_payload_in_the_sbatch_script(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = render_sbatch(_spec(out, {"PYTHONPATH": "/mine/lib", "NCCL_DEBUG": "INFO"}))
    exports = [line for line in script.splitlines() if line.startswith("export ") and "MASTER" not in line]
    body = "; ".join(exports)
    for inherited, expected in (("", f"{out}:/mine/lib"), ("/site", f"{out}:/mine/lib")):
        ran = subprocess.run(["bash", "-c", f"set -euo pipefail; {body}; printf %s \"$PYTHONPATH\""],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": inherited})
        assert ran.stdout == expected, ran.stderr
    ran = subprocess.run(["bash", "-c", f"set -euo pipefail; {'; '.join(exports[-1:])}; printf %s \"$PYTHONPATH\""],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/site"})
    assert ran.stdout == f"{out}:/site", "without a PYTHONPATH in the file the inherited one stays behind the payload"


def test_a_pythonpath_of_the_file_is_kept_behind_the_payload_on_kubernetes() -> None:
    *_, job = render_objects(k8s_spec(env={"PYTHONPATH": "/mine/lib"}))
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "PYTHONPATH"] == ["/opt/cloudai-mbridge:/mine/lib"]
