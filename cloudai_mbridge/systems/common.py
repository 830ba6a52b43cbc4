"""What the workloads and both schedulers share: system facts, secret screening, the container image, the run folder."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from cloudai.core import DockerImage, System, TestRun

from .._version import installed_version
from ..atomic import write_atomic
from ..catalog import get_gpu
from ..catalog.gpus import GPU_ENV
from ..launch.envnames import reserved_env_name
from ..launch.payload import UnsafeOutputPathError, claim_run_dir
from ..redact import (
    REDACTED,
    SECRET_NAME,
    WANDB_SHAPE,
    looks_random,
    remember,
    secret_value_problem,
    string_leaves,
    text_secret_problem,
)
from ..rules import PointRejectedError, Violation

# Environment variables whose names say credential (redact.SECRET_NAME) must come from the submitting shell's
# environment (sbatch forwards it) or a Kubernetes secret, never from a TOML file that is copied into the results.


def redact_secret_env(env: Any) -> Any:
    """Blank credential values at parse time. Raising there would not help: CloudAI's error log prints the input,
    value included. The blanked keys are reported as a violation when the point is checked or generated."""
    if not isinstance(env, dict):
        return env
    for k, v in env.items():
        if SECRET_NAME.search(str(k)):
            remember(v)  # an error message may quote it apart from its name
    return {k: (REDACTED if SECRET_NAME.search(str(k)) else v) for k, v in env.items()}


CREDENTIALS_KNOB = "CLOUDAI_MBRIDGE_K8S_CREDENTIALS"


def _json_strings(raw: Any) -> list[str]:
    """The string values of a JSON object (the whole text when it is not one: the knob's own check refuses it)."""
    import json

    try:
        data = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return [str(raw)]
    return [v for v in data.values() if isinstance(v, str)] if isinstance(data, dict) else [str(raw)]


def name_secret_problem(name: str) -> str | None:
    """Why an environment variable's NAME is a secret (None when it is not): a token's shape or a credential
    assignment in it, a W&B key's shape, or a long random string."""
    why = text_secret_problem(name)
    if why:
        return why
    if WANDB_SHAPE.search(name):
        return "has the shape of a W&B API key"
    if looks_random(name):
        return "looks like a generated key or token (a long random string)"
    return None


def secret_env_violations(env: dict[str, Any], where: str) -> list[Violation]:
    for key, value in env.items():
        if SECRET_NAME.search(str(key)):
            remember(value)
    found = [
        Violation(
            "no-secrets-in-toml",
            {f"{where}.{key}": "<redacted>"},
            "credentials must not be written in a TOML file (it is copied into the results)",
            f"remove {key} there and export it in the shell that runs cloudai; the job inherits it",
        )
        for key in env
        if SECRET_NAME.search(str(key))
    ]
    for key in env:  # a NAME that is itself a token (hf_..., AKIA..., a W&B key): it would be an export in the script
        if why := name_secret_problem(str(key)):
            remember(str(key))
            found.append(Violation(
                "no-secrets-in-toml",
                {f"{where}.<redacted name>": "<redacted>"},
                f"the name of a variable {why} (the TOML file is copied into the results and the name is exported "
                "in the job's script)",
                "remove that variable; a variable's name is an upper-case word (HF_TOKEN), its value comes from the "
                "environment of the shell that runs cloudai",
            ))
    for key, value in env.items():
        if key == CREDENTIALS_KNOB:  # names Kubernetes Secrets ({"HF_TOKEN": "hf-token:token"}): check what it names
            value = " ".join(_json_strings(value))
        why = None if SECRET_NAME.search(str(key)) else secret_value_problem(str(key), value, environment=True)
        if why:
            remember(value)
            found.append(Violation(
                "no-secrets-in-toml",
                {f"{where}.{key}": "<redacted>"},
                f"the value {why} (the TOML file is copied into the results)",
                "remove it there; pass credentials through the environment of the shell that runs cloudai "
                "(or a Kubernetes Secret) under their usual name (HF_TOKEN, WANDB_API_KEY)",
            ))
    return found


def secret_field_violations(cmd_args: Any) -> list[Violation]:
    """A cmd_args string with the shape of a credential (an hf_... token pasted into hf_model_id, ...)."""
    return [
        Violation(
            "no-secrets-in-toml",
            {f"cmd_args.{path}": "<redacted>"},
            f"the value {why}, and cmd_args are written into the job's files",
            "put the model's id or path there; pass the token as HF_TOKEN in the environment of the shell that "
            "runs cloudai",
        )
        for path, value in string_leaves(cmd_args)
        if (why := secret_value_problem(path, value))
    ]


def env_value_violations(system: System | None) -> list[Violation]:
    """A system's ``[global_env_vars]`` value that is no text or whole number (true, 1e3, a table, a list, a date):
    the job would export Python's rendering of it (True, 1000.0, {'a': 1}), not what the file says."""
    found = []
    for key, value in (getattr(system, "global_env_vars", None) or {}).items():
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            continue
        kind = ("a boolean" if isinstance(value, bool) else "a float" if isinstance(value, float)
                else "a table" if isinstance(value, dict) else "a list" if isinstance(value, (list, tuple))
                else "a date/time" if hasattr(value, "isoformat") else f"a {type(value).__name__}")
        found.append(Violation(
            "env-value", {f"global_env_vars.{key}": kind},
            f"global_env_vars.{key} is {kind}: an environment variable holds text, and the job would export "
            f"{str(value)[:60]!r} (Python's rendering), not what the file says",
            f"write it as a quoted string, e.g. {key} = \"{_as_text(value)}\""))
    return found


def env_name_violations(env: dict[str, Any], field: str, where: str) -> list[Violation]:
    """Names bash or the launch reserve (launch/envnames.py): read-only in bash, set by bash itself, changing how bash
    runs the script, or set by the launch for the payload. ``field`` is the table, ``where`` says whose file."""
    found = []
    for key in env:
        reserved = reserved_env_name(str(key))
        if reserved:
            found.append(Violation("env-name", {field: str(key)}, f"{field} {where}: {reserved[0]}", reserved[1]))
    return found


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else "..."


def system_env(system: System | None) -> dict[str, str]:
    env = getattr(system, "global_env_vars", None) or {}
    return {str(k): str(v) for k, v in env.items()}


def system_network(system: System | None, requested: str) -> str:
    """The network fabric: the test's explicit choice, else EFA when the system configures libfabric for EFA."""
    if requested != "auto":
        return requested
    return "efa" if system_env(system).get("FI_PROVIDER", "").lower() == "efa" else "ib"




def system_gpu(system: System | None) -> str | None:
    """The GPU model the system file names (``CLOUDAI_MBRIDGE_GPU`` in its ``[global_env_vars]``), lower-cased."""
    value = system_env(system).get(GPU_ENV, "").strip().lower()
    return value or None


def resolve_gpu(test_gpu: str | None, system: System | None) -> str:
    """The GPU a training point runs on: the system decides. A test that names another GPU, a system that names an
    unknown one, or neither naming one is a ValueError whose message names the files' fields and the fix."""
    from ..catalog import GPUS

    named = system_gpu(system)
    where = f"system {getattr(system, 'name', '?')!r}"
    if named is not None and named not in GPUS:
        raise ValueError(f"{where}: [global_env_vars] {GPU_ENV} = {named!r} is not a GPU the plugin knows. Fix: one "
                         f"of {', '.join(GPUS)}")
    if named is not None and test_gpu is not None and test_gpu != named:
        raise ValueError(f"the test says gpu = {test_gpu!r} but {where} is {named} ([global_env_vars] {GPU_ENV}); "
                         f"its memory and rules would describe GPUs the job never gets. Fix: run it on a {test_gpu} "
                         f"system, or set gpu = {named!r} (or drop gpu: the system's is used)")
    gpu = named or test_gpu
    if gpu is None:
        raise ValueError(f"no GPU model: {where} does not name one ([global_env_vars] {GPU_ENV}) and the test sets no "
                         f"gpu. Fix: add {GPU_ENV} = \"h100\" (or {', '.join(g for g in GPUS if g != 'h100')}) to the "
                         "system file's [global_env_vars]")
    return gpu


# GPUs per node of a system whose file has no such field (CloudAI's standalone system forbids unknown keys)
GPUS_PER_NODE_ENV = "CLOUDAI_MBRIDGE_GPUS_PER_NODE"


def system_gpus_per_node(system: System | None, gpu_name: str | None) -> int:
    """GPUs per node from the system file (gpus_per_node, else ntasks_per_node, else [global_env_vars]
    CLOUDAI_MBRIDGE_GPUS_PER_NODE), else the GPU type's usual node."""
    for attr in ("gpus_per_node", "ntasks_per_node"):
        value = getattr(system, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    raw = system_env(system).get(GPUS_PER_NODE_ENV)
    if raw is not None:
        text = raw.strip()
        if not (text.isascii() and text.isdigit() and 0 < int(text) <= 64):
            raise ValueError(f"system {getattr(system, 'name', '?')!r}: [global_env_vars] {GPUS_PER_NODE_ENV} = "
                             f"{raw!r} is not a GPU count. Fix: the number of GPUs this machine runs ranks on, "
                             f'1 to 64 (e.g. {GPUS_PER_NODE_ENV} = "4")')
        return int(text)
    if gpu_name:
        return get_gpu(gpu_name).gpus_per_node
    return 1


def container_image(url: str | None, cache: dict[str, DockerImage]) -> DockerImage | None:
    if not url:
        return None
    if url not in cache:
        cache[url] = DockerImage(url=url)
    return cache[url]


def open_run_dir(tr: TestRun, problems: list[Violation], system: System | None = None) -> Path:
    """Refuse a point Megatron would reject, say what deserves a warning about an accepted one (its test's
    ``cautions``), then take the point's run folder (never one holding earlier results)."""
    if problems:
        raise PointRejectedError(tr.name, problems)
    cautions = getattr(tr.test, "cautions", None)
    for caution in cautions(tr, system) if cautions else []:
        logging.warning("%s: %s", tr.name, caution)
    out = tr.output_path.absolute()
    # The CLI refuses unsafe scenario names / test ids before CloudAI derives folders from them (session.py).
    if ".." in tr.output_path.parts:
        raise UnsafeOutputPathError(f"test {tr.name!r}: results folder {tr.output_path} steps out with '..'. "
                                    "Fix: use a plain test id / scenario name without '/' or '..'.")
    out.mkdir(parents=True, exist_ok=True)
    claim_run_dir(out)
    return out


def store_test_run(tr: TestRun, test_cmd: str, full_cmd: str) -> Path:
    """CloudAI's ``test-run.toml`` of a point (what generate-report and the DSE's best-config report read back),
    the same content as CloudAI's own store_test_run, through the plugin's one writer (atomic.py)."""
    import toml
    from cloudai.models.scenario import TestRunDetails

    details = TestRunDetails.from_test_run(tr, test_cmd=test_cmd, full_cmd=full_cmd)
    return write_atomic(tr.output_path / "test-run.toml", toml.dumps(details.model_dump()))


@functools.lru_cache(maxsize=1)
def generated_by() -> str:
    return f"cloudai-mbridge {installed_version('cloudai-mbridge')} with CloudAI {installed_version('cloudai')}"
