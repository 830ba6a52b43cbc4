"""The cluster settings: CLOUDAI_MBRIDGE_K8S_* in the system's global_env_vars (CloudAI's KubernetesSystem forbids extra
fields), parsed and checked into K8sSettings; each bad value is a K8sConfigError that names the key and the fix."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...catalog.gpus import GPU_ENV
from .apirules import problems_of
from .validation import (
    _QUANTITY,
    INT64_MAX,
    PAYLOAD_ROOT,
    PREFIX,
    RESULTS_DIR,
    SHM_DIR,
    K8sConfigError,
    is_env_name,
    is_label_key,
    shown,
)

KINDS = ("job", "pytorchjob")
_TOLERATION_KEYS = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Credential:
    """An environment variable whose value the kubelet reads from a Secret: we only know its name and key."""

    env: str
    secret: str
    key: str


@dataclass(frozen=True)
class K8sSettings:
    kind: str = "job"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    results_pvc: str | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)  # absolute mount path -> PersistentVolumeClaim name
    credentials: tuple[Credential, ...] = ()
    efa_devices: int | None = None
    extra_resources: Mapping[str, str] = field(default_factory=dict)
    shm_size: str = "64Gi"
    master_port: int = 29500
    service_account: str | None = None
    scheduler_name: str | None = None
    priority_class: str | None = None


KNOBS: dict[str, str] = {
    "KIND": '"job" (Indexed Job + headless Service, default) or "pytorchjob" (Kubeflow training operator)',
    "NODE_SELECTOR": 'JSON object of node labels, e.g. {"node.kubernetes.io/instance-type": "p6-b300.48xlarge"}',
    "TOLERATIONS": 'JSON list of tolerations, e.g. [{"key": "nvidia.com/gpu", "operator": "Exists"}]',
    "RESULTS_PVC": "PersistentVolumeClaim mounted at /results (subPath = job name); default: an emptyDir",
    "MOUNTS": 'JSON object: absolute path in the pod -> PersistentVolumeClaim, e.g. {"/fsx": "fsx-claim"}',
    "CREDENTIALS": 'JSON object: env var -> "secret-name[:key]" (key defaults to "token"), e.g. '
    '{"HF_TOKEN": "hf-token:token"}',
    "EFA_DEVICES": "vpc.amazonaws.com/efa devices per pod (required on EFA systems), e.g. 16",
    "EXTRA_RESOURCES": 'JSON object of extra resource limits = requests, e.g. {"rdma/rdma_shared_device_a": 1}; '
    "never nvidia.com/gpu (from gpus_per_node) nor, on an EFA system, vpc.amazonaws.com/efa (from EFA_DEVICES)",
    "SHM_SIZE": 'size of the memory-backed /dev/shm, e.g. "64Gi" (the default)',
    "MASTER_PORT": "torchrun rendezvous port, default 29500",
    "SERVICE_ACCOUNT": "serviceAccountName of the pods",
    "SCHEDULER_NAME": "schedulerName of the pods (a gang scheduler such as kai-scheduler or volcano)",
    "PRIORITY_CLASS": "priorityClassName of the pods",
}


def _json(key: str, raw: str, expected: type, example: str) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise K8sConfigError(key, raw, f"not valid JSON ({e.msg} at character {e.pos})", f"write {example}") from None
    if not isinstance(value, expected):
        raise K8sConfigError(key, raw, f"must be a JSON {expected.__name__}", f"write {example}")
    return value


def _name(key: str, raw: str, what: str = "a Kubernetes object name") -> str:
    errs = problems_of("dns1123-subdomain", raw)  # apirules: GN 43 NameIsDNSSubdomain
    if errs:
        raise K8sConfigError(key, raw, f"not {what} ({'; '.join(errs)})", "use lowercase letters, digits, '-' and '.'")
    return raw


def _int(key: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise K8sConfigError(key, raw, "not an integer", f"write a number from {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise K8sConfigError(key, raw, f"out of range {lo}..{hi}", f"write a number from {lo} to {hi}")
    return value


def _quantity(key: str, raw: object) -> str:
    text = str(raw) if isinstance(raw, (int, str)) and not isinstance(raw, bool) else None
    if text is None or not _QUANTITY.match(text):
        raise K8sConfigError(key, raw, "not a Kubernetes quantity", 'write e.g. 8, "64Gi" or "500m"')
    return text


def _node_selector(key: str, raw: str) -> dict[str, str]:
    value = _json(key, raw, dict, '{"node.kubernetes.io/instance-type": "p6-b300.48xlarge"}')
    for k, v in value.items():
        errs = problems_of("label-key", k) + [f"value {m}" for m in problems_of("label-value", v)]
        if errs:
            raise K8sConfigError(f"{key}[{k!r}]", v, f"not a node label key and value ({'; '.join(errs)})",
                                 "use label syntax")
    return value


def _tolerations(key: str, raw: str) -> tuple[dict[str, Any], ...]:
    value = _json(key, raw, list, '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]')
    for i, tol in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(tol, dict):
            raise K8sConfigError(where, tol, "must be a JSON object", 'write {"key": ..., "operator": ...}')
        for k, v in tol.items():
            typ = _TOLERATION_KEYS.get(k)
            if typ is None:
                raise K8sConfigError(where, k, "unknown toleration field", f"use {', '.join(_TOLERATION_KEYS)}")
            if not isinstance(v, typ) or isinstance(v, bool):
                raise K8sConfigError(f"{where}.{k}", v, f"must be a {typ.__name__}", f"write a {typ.__name__}")
        operator, effect = tol.get("operator", "Equal"), tol.get("effect", "")
        if operator not in _TOLERATION_OPERATORS:
            raise K8sConfigError(f"{where}.operator", tol["operator"], "unknown operator", "use Exists or Equal")
        if effect not in _TOLERATION_EFFECTS:
            raise K8sConfigError(
                f"{where}.effect", tol["effect"], "unknown effect", "use NoSchedule, PreferNoSchedule or NoExecute"
            )
        # What the API server checks (core/validation ValidateTolerations) and the API type (tolerationSeconds: int64)
        key_name = tol.get("key", "")
        if key_name and not is_label_key(key_name):
            raise K8sConfigError(f"{where}.key", shown(key_name), "not a taint key (a label key)", "use label syntax")
        if not key_name and operator != "Exists":
            raise K8sConfigError(f"{where}.operator", operator, "must be Exists when key is empty", "add a key")
        if operator == "Exists" and tol.get("value"):
            raise K8sConfigError(f"{where}.value", tol["value"], "must be empty with operator Exists", "drop it")
        taint_value = tol.get("value", "")
        if operator == "Equal" and problems_of("label-value", taint_value):
            raise K8sConfigError(
                f"{where}.value",
                shown(taint_value),
                "not a taint value (a label value of at most 63 characters)",
                "use letters, digits, '-', '_', '.'",
            )
        if "tolerationSeconds" in tol:
            seconds = tol["tolerationSeconds"]
            if not -INT64_MAX - 1 <= seconds <= INT64_MAX:
                raise K8sConfigError(
                    f"{where}.tolerationSeconds",
                    seconds,
                    "beyond int64, the API's type for it",
                    "write a number of seconds, e.g. 300",
                )
            if effect != "NoExecute":
                raise K8sConfigError(
                    f"{where}.tolerationSeconds",
                    seconds,
                    "the API server takes it only with effect NoExecute",
                    'add "effect": "NoExecute" or drop tolerationSeconds',
                )
    return tuple(value)


def _mounts(key: str, raw: str) -> dict[str, str]:
    value = _json(key, raw, dict, '{"/fsx": "fsx-claim"}')
    reserved = (PAYLOAD_ROOT, RESULTS_DIR, SHM_DIR)
    for path, claim in value.items():
        where = f"{key}[{path!r}]"
        if not isinstance(claim, str):
            raise K8sConfigError(where, claim, "must be a PersistentVolumeClaim name", 'write {"/fsx": "fsx-claim"}')
        _name(where, claim, "a PersistentVolumeClaim name")
        if not path.startswith("/") or posixpath.normpath(path) != path or path == "/" or "\n" in path:
            raise K8sConfigError(where, path, "not a normalized absolute path", 'write e.g. "/fsx"')
        for r in reserved:
            if path == r or path.startswith(r + "/") or r.startswith(path + "/"):
                raise K8sConfigError(where, path, f"overlaps {r}, which cloudai-mbridge mounts", "mount elsewhere")
    return value


class _NotShown:
    """Stands for a value the error must not echo (a raw token pasted where a Secret's name belongs)."""

    def __repr__(self) -> str:
        return "<value not shown: it may be a credential>"


def _credentials(key: str, raw: str) -> tuple[Credential, ...]:
    try:
        return _credential_refs(key, raw)
    except K8sConfigError as e:
        from ...redact import remember

        remember(raw)  # CloudAI's error log quotes the whole global_env_vars table
        raise K8sConfigError(e.key, _NotShown(), e.problem, e.fix) from None


def _credential_refs(key: str, raw: str) -> tuple[Credential, ...]:
    value = _json(key, raw, dict, '{"HF_TOKEN": "<secret-name>:<key>"} (e.g. the Secret hf-token, key token)')
    out = []
    for env, ref in value.items():
        where = f"{key}[{env!r}]"
        if not is_env_name(env):
            raise K8sConfigError(where, env, "not an environment variable name", "use letters, digits and '_'")
        if not isinstance(ref, str):
            raise K8sConfigError(where, ref, 'must be "secret-name[:key]"', 'write "hf-token:token"')
        secret, _, secret_key = ref.partition(":")
        secret_key = secret_key or "token"
        _name(where, secret, "a Secret name")
        errs = problems_of("config-key", secret_key)  # apirules: AM 411 IsConfigMapKey
        if errs:
            raise K8sConfigError(where, ref, f"the key is not a valid Secret key ({'; '.join(errs)})",
                                 "use at most 253 letters, digits, '-', '_' and '.', not '.', '..' nor starting with "
                                 "'..'")
        out.append(Credential(env, secret, secret_key))
    return tuple(out)


# Resources the manifests set themselves (objects._resources): from the plan, never from EXTRA_RESOURCES.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# The container resources Kubernetes knows without a domain (core/v1 helper IsStandardContainerResourceName).
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_INTEGER = re.compile(r"[0-9]+\Z")


def _extra_resources(key: str, raw: str, env: Mapping[str, object] | None = None) -> dict[str, str]:
    """Resources the pods request on top of what the plan gives them (limits = requests). A resource the manifests
    set themselves (the GPUs of the plan; the EFA devices on an EFA system) is refused: EXTRA_RESOURCES would
    silently override the plan's value. Names follow the API server's rules for container resources; an extended
    resource (a domain-prefixed name) takes whole numbers only."""
    value = _json(key, raw, dict, '{"rdma/rdma_shared_device_a": 1}')
    env = env or {}
    efa_system = str(env.get("FI_PROVIDER", "")).strip().lower() == "efa" or PREFIX + "EFA_DEVICES" in env
    out = {}
    for name, qty in value.items():
        where = f"{key}[{name!r}]"
        lowered = name.lower()
        if lowered == GPU_RESOURCE:
            raise K8sConfigError(
                where, qty, f"cloudai-mbridge sets {GPU_RESOURCE} itself, to the plan's GPUs per node (gpus_per_node "
                "of the system file); a value here would override it",
                f"remove {name!r} from {key}; change gpus_per_node in the system file to give the pods other GPUs")
        if lowered == EFA_RESOURCE and efa_system:
            raise K8sConfigError(
                where, qty, f"cloudai-mbridge sets {EFA_RESOURCE} itself on an EFA system (FI_PROVIDER = efa), "
                f"from {PREFIX}EFA_DEVICES; a value here would override it",
                f"remove {name!r} from {key}; set the devices per pod with {PREFIX}EFA_DEVICES")
        if not isinstance(name, str) or not is_label_key(name):
            raise K8sConfigError(where, name, "not a resource name", 'write e.g. "rdma/ib" or "hugepages-2Mi"')
        prefix, _, base = name.rpartition("/")
        if not prefix:
            if base.startswith("hugepages-"):
                if not _QUANTITY.match(base[len("hugepages-"):]):
                    raise K8sConfigError(where, name, "not a huge page size", 'write e.g. "hugepages-2Mi"')
            elif base not in _STANDARD_RESOURCES:
                raise K8sConfigError(
                    where, name, "neither a standard container resource nor a device plugin's resource (those have a "
                    "domain, e.g. rdma/ib)", f"use {', '.join(_STANDARD_RESOURCES)}, hugepages-<size> or "
                    "<domain>/<name> as the device plugin advertises it")
        elif prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or base.startswith("requests."):
            raise K8sConfigError(where, name, "a name Kubernetes reserves for itself",
                                 "use the device plugin's own <domain>/<name>")
        text = _quantity(where, qty)
        if prefix and not _INTEGER.match(text):
            raise K8sConfigError(where, qty, "an extended resource is counted in whole devices",
                                 "write a whole number, e.g. 1")
        out[name] = text
    huge = [n for n in out if n.startswith("hugepages-")]
    if huge and not {"cpu", "memory"} & set(out):  # the API server: "HugePages require cpu or memory"
        raise K8sConfigError(f"{key}[{huge[0]!r}]", out[huge[0]], "the API server takes huge pages only with a cpu "
                             "or memory request", f'add "memory" (e.g. "64Gi") to {key}')
    return out


def parse_settings(env: Mapping[str, object]) -> tuple[K8sSettings, dict[str, str]]:
    """Split ``env`` into our settings (CLOUDAI_MBRIDGE_K8S_*) and the variables that go into the pods."""
    pod_env: dict[str, str] = {}
    knobs: dict[str, str] = {}
    for k, v in env.items():
        if k.startswith(PREFIX):
            if k[len(PREFIX) :] not in KNOBS:
                raise K8sConfigError(k, v, "unknown cloudai-mbridge Kubernetes setting", f"use one of {_knob_list()}")
            knobs[k[len(PREFIX) :]] = str(v).strip()
        elif k != GPU_ENV:  # the plugin's GPU setting (catalog/gpus.py) is no pod variable
            pod_env[k] = str(v)
    kw: dict[str, Any] = {}
    for knob, raw in knobs.items():
        key = PREFIX + knob
        if knob == "KIND":
            if raw not in KINDS:
                raise K8sConfigError(key, raw, "unknown kind", f"use {' or '.join(KINDS)}")
            kw["kind"] = raw
        elif knob == "NODE_SELECTOR":
            kw["node_selector"] = _node_selector(key, raw)
        elif knob == "TOLERATIONS":
            kw["tolerations"] = _tolerations(key, raw)
        elif knob == "RESULTS_PVC":
            kw["results_pvc"] = _name(key, raw, "a PersistentVolumeClaim name")
        elif knob == "MOUNTS":
            kw["mounts"] = _mounts(key, raw)
        elif knob == "CREDENTIALS":
            kw["credentials"] = _credentials(key, raw)
        elif knob == "EFA_DEVICES":
            kw["efa_devices"] = _int(key, raw, 1, 64)
        elif knob == "EXTRA_RESOURCES":
            kw["extra_resources"] = _extra_resources(key, raw, env)
        elif knob == "SHM_SIZE":
            kw["shm_size"] = _quantity(key, raw)
        elif knob == "MASTER_PORT":
            kw["master_port"] = _int(key, raw, 1, 65535)
        else:
            kw[knob.lower()] = _name(key, raw)
    return K8sSettings(**kw), pod_env


def _knob_list() -> str:
    return ", ".join(PREFIX + k for k in KNOBS)
