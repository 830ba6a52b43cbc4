"""Kubernetes constants, the error every check raises, and the checks of names and values (no CloudAI, no I/O)."""

from __future__ import annotations

import re

from ..invisible import describe_invisible
from .apirules import RULES, problems_of

PAYLOAD_ROOT = "/opt/cloudai-mbridge"
RESULTS_DIR = "/results"
SHM_DIR = "/dev/shm"
PAYLOAD_PACKAGE = "mbridge_payload"
CONFIG_NAME = "mbridge_config.json"
CONFIG_PATH = f"{PAYLOAD_ROOT}/{CONFIG_NAME}"
CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses a ConfigMap whose data exceeds 1 MiB
# etcd's default --max-request-bytes (1.5 MiB): the API server cannot store a bigger object. OBJECT_BUDGET leaves room
# for what the server adds to ours (defaults, metadata.managedFields, status; the pods a Job makes repeat its template).
OBJECT_LIMIT = 1536 * 1024
OBJECT_BUDGET = OBJECT_LIMIT - 64 * 1024
# Linux's execve(2) refuses one environment or argument string ("NAME=value" and its NUL) over MAX_ARG_STRLEN
# (32 pages of 4 KiB) with E2BIG: the container would not start.
MAX_ARG_STRLEN = 32 * 4096
INT64_MAX = 2**63 - 1  # tolerationSeconds, activeDeadlineSeconds: int64 in the API types
MAX_INDEXED_PARALLELISM = 100_000  # the API server's limit on an Indexed Job's parallelism (batch validation)

PREFIX = "CLOUDAI_MBRIDGE_K8S_"
MANAGED_BY = "cloudai-mbridge"
JOB_LABEL = "cloudai-mbridge/job"
ROLE_LABEL = "cloudai-mbridge/role"
TEST_LABEL = "cloudai-mbridge/test"
WAIT_ANNOTATION = "cloudai-mbridge/wait-for-completion"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# torchrun --tee prefixes each line of a rank with this; the runner splits pod logs into logs/rank-<R>.log by it.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
PYTORCHJOB_CONTAINER = "pytorch"  # the training operator's webhook requires a container of this name
PYTORCHJOB_PORT_NAME = "pytorchjob-port"  # the operator reads MASTER_PORT from the container port of this name
NAME_LIMIT = 40  # room for "-convert", "-payload", "-<index>" and the operator's "-worker-<i>" within 63

_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\Z")
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")


class K8sConfigError(ValueError):
    """A value that cannot become a valid Kubernetes object; names the key, the problem and the fix."""

    def __init__(self, key: str, value: object, problem: str, fix: str) -> None:
        chars = describe_invisible(value) if isinstance(value, str) else ""
        if chars:  # a name or label that looks right on screen: say which character is hidden where
            problem = f"{problem}; it holds a character that does not show ({chars})"
        self.key, self.value, self.problem, self.fix = key, value, problem, fix
        super().__init__(f"{key} = {value!r}: {problem}. Fix: {fix}")


class Shown:
    """A long value as an error message shows it: its start and its size, on one line."""

    def __init__(self, text: str, keep: int = 40) -> None:
        size = len(text.encode())
        self.text = repr(text) if len(text) <= keep else f"{text[:keep]!r}... ({size} bytes)"

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def shown(value: object) -> object:
    return Shown(value) if isinstance(value, str) and len(value) > 40 else value


def is_env_name(name: str) -> bool:
    """Kubernetes' IsEnvVarName (apirules.env_name)."""
    return not problems_of("env-name", name)


def require(rule: str, where: str, value: object, fix: str | None = None) -> None:
    """Refuse ``value`` unless it passes the API server's rule ``rule`` (apirules.RULES), naming what is wrong."""
    errs = problems_of(rule, value)
    if errs:
        r = RULES[rule]
        raise K8sConfigError(where, shown(value), f"not {r.what} ({'; '.join(errs)})", fix or r.fix)


def check_exec_string(where: str, name: str, value: str, fix: str) -> None:
    """Refuse an environment value the container's execve would refuse (E2BIG)."""
    size = len(name.encode()) + 1 + len(value.encode()) + 1
    if size > MAX_ARG_STRLEN:
        raise K8sConfigError(
            where,
            Shown(value),
            f"{size} bytes as NAME=value: over the {MAX_ARG_STRLEN} bytes Linux takes for one environment string "
            "(execve fails with E2BIG: the container would not start)",
            fix,
        )


def escape(value: str) -> str:
    """A string the kubelet's $(VAR) expansion turns back into exactly ``value``."""
    return value.replace("$", "$$")


def is_dns1123_subdomain(name: str) -> bool:
    return not problems_of("dns1123-subdomain", name)


def is_label_key(key: str) -> bool:
    return not problems_of("label-key", key)


def label_value(text: str) -> str:
    """Any text as a valid label value (lossy: only for labels that help a human filter, never for lookups)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def job_name(test_name: str, step: int, unique: str) -> str:
    """A DNS-1035 label of at most NAME_LIMIT characters: the test's name, the sweep step and a run-unique hash."""
    base = re.sub(r"[^a-z0-9]+", "-", test_name.lower())
    base = re.sub(r"^[^a-z]+", "", base).strip("-") or "mbridge"
    suffix = f"-{max(step, 0)}-{unique[:8]}"
    return base[: NAME_LIMIT - len(suffix)].rstrip("-") + suffix


def check_namespace(namespace: str) -> str:
    require("dns1123-label", "default_namespace", namespace)  # GN 69 ValidateNamespaceName
    return namespace


def time_limit_seconds(text: str | None) -> int | None:
    """Slurm's time formats (what CloudAI scenarios use): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    if not text:
        return None
    m = _TIME.match(text.strip())
    if not m:
        raise K8sConfigError("time_limit", text, "not a time", 'write e.g. "02:00:00" or "1-00:00:00"')
    days, a, b, c = m.groups()
    if days is not None:
        h, mi, s = int(a), int(b or 0), int(c or 0)
    elif c is not None:
        h, mi, s = int(a), int(b), int(c)
    elif b is not None:
        h, mi, s = 0, int(a), int(b)
    else:
        h, mi, s = 0, int(a), 0
    seconds = ((int(days or 0) * 24 + h) * 60 + mi) * 60 + s
    if seconds <= 0:
        raise K8sConfigError("time_limit", text, "must be positive", 'write e.g. "02:00:00"')
    if seconds > INT64_MAX:
        raise K8sConfigError(
            "time_limit", shown(text), "beyond activeDeadlineSeconds (int64 seconds)", 'write e.g. "7-00:00:00"'
        )
    return seconds
