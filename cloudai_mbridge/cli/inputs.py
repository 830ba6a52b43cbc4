"""What a scenario's free text and the files its tests name must not be, checked once per scenario before any job is
generated (preflight.scenario_check: dry-run, run, preflight and verify-configs refuse the scenario as a whole).

- Secrets in free text (redact.text_secret_problem: a token's shape, a URL with a password, NAME=value under a
  credential name): in the scenario's name, a test id or a test's name (they become folder names, test-run.toml and
  log lines), in srun / sbatch arguments, mounts, URLs and every other string of the system file and the test
  definitions. Refused, naming the field but never the value: a job written from redacted arguments would run
  something else. The environment variables and cmd_args are the rules' (no-secrets-in-toml, per point); a test's
  description is redacted where it is read instead (workloads/base.py), since nothing runs it.
- The golden-values file a training test names (metrics/golden.py read_golden_file): missing, unreadable, too large,
  too deep or not in Bridge's shape is refused now rather than at the end of the run.
- The hf_config_dir a training test names, when this machine sees it (the payload checks it again on the cluster,
  payload/hf_config.py config_dir_files): a link out of the folder, a file that is not a regular file, a size above
  the limits, a config.json that is no model config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..redact import string_leaves, text_secret_problem

_FIX = ("Fix: take it out; pass credentials through the environment of the shell that runs cloudai (sbatch forwards "
        "it) or a Kubernetes Secret, under their usual names (HF_TOKEN, WANDB_API_KEY)")


def _safe(text: Any) -> str:
    """``text`` as a message may show it: quoted, or <redacted> when it holds a secret."""
    return "<redacted>" if text_secret_problem(text) else repr(text)


def _dump(model: Any, exclude: set[str]) -> Any:
    try:
        return model.model_dump(exclude=exclude)
    except Exception:  # not a pydantic model (a stand-in in a test): nothing to walk
        return {}


def secret_problems(system: Any, scenario: Any) -> list[str]:
    """Every free-text field of the system, the scenario and its tests that holds a secret, one message each."""
    problems = []
    if (why := text_secret_problem(scenario.name)) is not None:
        problems.append(f"scenario name <redacted> {why}, and the name becomes the results folder's name and is "
                        "written into test-run.toml and the logs. Fix: rename the scenario (name = ...)")
    for tr in scenario.test_runs:
        test = f"test {_safe(tr.name)}"
        if (why := text_secret_problem(tr.name)) is not None:
            problems.append(f"[[Tests]] id <redacted> {why}, and the id becomes a results folder's name and is "
                            "written into test-run.toml and the logs. Fix: rename it (id = ...)")
        if (why := text_secret_problem(tr.test.name)) is not None:
            problems.append(f"{test}: the test's name <redacted> {why}, and it is written into test-run.toml and "
                            "the logs. Fix: rename the test (name = ...)")
        if (why := text_secret_problem(getattr(tr, "extra_srun_args", None))) is not None:
            problems.append(f"{test}: [[Tests]] extra_srun_args {why}; it would be written into the job script. "
                            f"{_FIX}")
        fields = _dump(tr.test, {"cmd_args", "extra_env_vars", "description", "name"})
        for path, value in string_leaves(fields):
            if (why := text_secret_problem(value)) is not None:
                problems.append(f"{test}: {path} {why}; it would be written into the job's files. {_FIX}")
    system_name = _safe(getattr(system, "name", "?"))
    for path, value in string_leaves(_dump(system, {"global_env_vars"})):
        if (why := text_secret_problem(value)) is not None:
            problems.append(f"system {system_name}: {path} {why}; it would be written into the job's files and the "
                            f"results' copy of the system file. {_FIX}")
    return problems


def file_problems(scenario: Any) -> list[str]:
    """The golden-values file and the hf_config_dir of each training test, checked where this machine can see them."""
    from ..metrics.golden import golden_file_problem
    from ..payload.hf_config import HubError, config_dir_files

    problems = []
    for tr in scenario.test_runs:
        args = getattr(tr.test, "cmd_args", None)
        golden = getattr(args, "golden_values", None)
        if isinstance(golden, str):
            path = Path(golden).expanduser()
            why = golden_file_problem(path)
            if why:
                where = "" if path.is_absolute() else f" (relative to {Path.cwd()}, where CloudAI runs)"
                problems.append(f"test {_safe(tr.name)}: cmd_args.golden_values = {golden!r}{where} {why}. Fix: "
                                "name an existing golden-values JSON in Megatron-Bridge's format (every run writes "
                                "its own as golden_values.json in its folder), or remove golden_values")
        folder = getattr(args, "hf_config_dir", None)
        if isinstance(folder, str) and Path(folder).exists():
            try:
                config_dir_files(folder)
            except HubError as e:
                problems.append(f"test {_safe(tr.name)}: cmd_args.{e}")
    return problems


def input_problems(system: Any, scenario: Any) -> list[str]:
    """secret_problems, then (when none) file_problems."""
    return secret_problems(system, scenario) or file_problems(scenario)
