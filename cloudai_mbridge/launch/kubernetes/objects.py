"""Render the Kubernetes objects of one job from plain data: no CloudAI, no cluster, no I/O.

What a job becomes (``kind = "job"``, the default)::

    ConfigMap  <name>-payload   the payload package + mbridge_config.json, mounted read-only at /opt/cloudai-mbridge
    Job        <name>-convert   optional one-pod pre-step (HF -> Megatron conversion); annotated to be waited for
    Service    <name>           headless, selects the pods of <name>: gives pod i the name <name>-i.<name>
    Job        <name>           Indexed, parallelism = completions = nodes, one pod per node running torchrun

``kind = "pytorchjob"`` replaces Service + Job by a Kubeflow ``PyTorchJob`` (Master + Workers): the training
operator makes the services and sets RANK / MASTER_ADDR / MASTER_PORT itself.

Why the argv is safe without a shell: ``command`` is the argv list and nothing runs a shell. The kubelet still
expands ``$(VAR)`` in ``command`` and in env values, so every ``$`` that comes from a TOML value is doubled
(``$$`` is the kubelet's escape for one ``$``); only the references we write on purpose (``$(NODE_RANK)``) stay.
Secrets only ever appear as ``secretKeyRef`` (a Secret's name and key), never as a value.

Delivery: the payload package and the config travel in a ConfigMap (checked against its 1 MiB limit), so a run needs
no shared file system between the submitting machine and the cluster; the same files are staged into the run's
output folder, as on Slurm. Results: /results is the PVC named by CLOUDAI_MBRIDGE_K8S_RESULTS_PVC (one subPath per
job) or an emptyDir; either way the runner collects every pod's log through the API. All ranks of a node share one
pod, so CUDA IPC and /dev/shm (memory-backed) work between them without hostIPC.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PAYLOAD_ROOT = "/opt/cloudai-mbridge"
RESULTS_DIR = "/results"
SHM_DIR = "/dev/shm"
PAYLOAD_PACKAGE = "mbridge_payload"
CONFIG_NAME = "mbridge_config.json"
CONFIG_PATH = f"{PAYLOAD_ROOT}/{CONFIG_NAME}"
CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses a ConfigMap whose data exceeds 1 MiB

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

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\Z")
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")

KINDS = ("job", "pytorchjob")
_TOLERATION_KEYS = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


class K8sConfigError(ValueError):
    """A value that cannot become a valid Kubernetes object; names the key, the problem and the fix."""

    def __init__(self, key: str, value: object, problem: str, fix: str) -> None:
        self.key, self.value, self.problem, self.fix = key, value, problem, fix
        super().__init__(f"{key} = {value!r}: {problem}. Fix: {fix}")


# ---------------------------------------------------------------------------------------------------------------
# Names and values


def escape(value: str) -> str:
    """A string the kubelet's $(VAR) expansion turns back into exactly ``value``."""
    return value.replace("$", "$$")


def is_dns1123_subdomain(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_DNS1123_LABEL.match(part) for part in name.split("."))


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (not prefix or is_dns1123_subdomain(prefix)) and len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


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
    if len(namespace) > 63 or not _DNS1123_LABEL.match(namespace):
        raise K8sConfigError(
            "default_namespace", namespace, "not a valid namespace name", "use lowercase letters, digits and '-'"
        )
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
    return seconds


# ---------------------------------------------------------------------------------------------------------------
# Settings: CLOUDAI_MBRIDGE_K8S_* in the system's global_env_vars (CloudAI's KubernetesSystem forbids extra fields)


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
    "EXTRA_RESOURCES": 'JSON object of extra resource limits = requests, e.g. {"rdma/rdma_shared_device_a": 1}',
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
    if not is_dns1123_subdomain(raw):
        raise K8sConfigError(key, raw, f"not {what}", "use lowercase letters, digits, '-' and '.'")
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
        if not is_label_key(k) or not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            raise K8sConfigError(f"{key}[{k!r}]", v, "not a node label key and value", "use label syntax")
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
        if tol.get("operator", "Equal") not in _TOLERATION_OPERATORS:
            raise K8sConfigError(f"{where}.operator", tol["operator"], "unknown operator", "use Exists or Equal")
        if tol.get("effect", "") not in _TOLERATION_EFFECTS:
            raise K8sConfigError(
                f"{where}.effect", tol["effect"], "unknown effect", "use NoSchedule, PreferNoSchedule or NoExecute"
            )
        if tol.get("operator") == "Exists" and tol.get("value"):
            raise K8sConfigError(f"{where}.value", tol["value"], "must be empty with operator Exists", "drop it")
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


def _credentials(key: str, raw: str) -> tuple[Credential, ...]:
    value = _json(key, raw, dict, '{"HF_TOKEN": "hf-token:token"}')
    out = []
    for env, ref in value.items():
        where = f"{key}[{env!r}]"
        if not _ENV_NAME.match(env):
            raise K8sConfigError(where, env, "not an environment variable name", "use letters, digits and '_'")
        if not isinstance(ref, str):
            raise K8sConfigError(where, ref, 'must be "secret-name[:key]"', 'write "hf-token:token"')
        secret, _, secret_key = ref.partition(":")
        secret_key = secret_key or "token"
        _name(where, secret, "a Secret name")
        if len(secret_key) > 253 or not _CONFIG_KEY.match(secret_key):
            raise K8sConfigError(where, ref, "the key is not a valid Secret key", "use letters, digits, '-', '_', '.'")
        out.append(Credential(env, secret, secret_key))
    return tuple(out)


def _extra_resources(key: str, raw: str) -> dict[str, str]:
    value = _json(key, raw, dict, '{"rdma/rdma_shared_device_a": 1}')
    out = {}
    for name, qty in value.items():
        if not is_label_key(name):
            raise K8sConfigError(f"{key}[{name!r}]", name, "not a resource name", 'write e.g. "rdma/ib"')
        out[name] = _quantity(f"{key}[{name!r}]", qty)
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
        else:
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
            kw["extra_resources"] = _extra_resources(key, raw)
        elif knob == "SHM_SIZE":
            kw["shm_size"] = _quantity(key, raw)
        elif knob == "MASTER_PORT":
            kw["master_port"] = _int(key, raw, 1, 65535)
        else:
            kw[knob.lower()] = _name(key, raw)
    return K8sSettings(**kw), pod_env


def _knob_list() -> str:
    return ", ".join(PREFIX + k for k in KNOBS)


# ---------------------------------------------------------------------------------------------------------------
# Objects


@dataclass(frozen=True)
class PodStep:
    """One workload object: ``argv`` = (python, "-m", module, ...). The last step of a job is the main one."""

    role: str  # label value and container name: "train", "refit", "convert"
    argv: tuple[str, ...]
    torchrun: bool = True  # main step: torchrun per pod, one pod per node; pre-steps: one plain pod
    wait: bool = False  # must succeed before the objects after it are created


@dataclass(frozen=True)
class K8sJobSpec:
    name: str
    namespace: str
    image: str
    num_nodes: int
    nproc_per_node: int
    gpus_per_node: int
    steps: tuple[PodStep, ...]
    payload_files: Mapping[str, str]  # path in mbridge_payload/ ("train/config.py") -> text
    config_text: str
    env: Mapping[str, str]
    settings: K8sSettings = field(default_factory=K8sSettings)
    network: str = "ib"
    host_network: bool = False
    time_limit_s: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def configmap_name(self) -> str:
        return f"{self.name}-payload"

    @property
    def main(self) -> PodStep:
        return self.steps[-1]


def configmap_key(path: str) -> str:
    """The ConfigMap key of a payload file: keys cannot hold '/', so "train/config.py" is "train.config.py" (its
    module name); ``payload_items`` mounts it back at mbridge_payload/train/config.py."""
    return path.replace("/", ".")


def payload_items(spec: K8sJobSpec) -> dict[str, str]:
    """ConfigMap key -> path of the file under the mount (PAYLOAD_ROOT), the payload's files and the config."""
    items: dict[str, str] = {}
    for path in spec.payload_files:
        parts = path.split("/")
        key = configmap_key(path)
        if any(part in ("", ".", "..") for part in parts) or key in items or key == CONFIG_NAME:
            raise K8sConfigError("payload file", path, "not a distinct relative path", "rename the payload file")
        items[key] = f"{PAYLOAD_PACKAGE}/{path}"
    items[CONFIG_NAME] = CONFIG_NAME
    return items


def configmap_data(spec: K8sJobSpec) -> dict[str, str]:
    data = {configmap_key(path): text for path, text in spec.payload_files.items()}
    data[CONFIG_NAME] = spec.config_text
    for key in data:
        if not _CONFIG_KEY.match(key):
            raise K8sConfigError("payload file", key, "not a valid ConfigMap key", "rename the payload file")
    payload_items(spec)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise K8sConfigError(
            "payload + config",
            f"{size} bytes",
            f"over the 1 MiB a ConfigMap can hold (limit {CONFIGMAP_LIMIT} bytes)",
            "shrink the payload package or the config; the ConfigMap carries both into the pods",
        )
    return data


def _meta(spec: K8sJobSpec, name: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": spec.namespace,
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, JOB_LABEL: spec.name, **spec.labels},
    }
    notes = {**spec.annotations, **(annotations or {})}
    if notes:
        meta["annotations"] = notes
    return meta


def _resources(spec: K8sJobSpec) -> dict[str, str]:
    res: dict[str, str] = {}
    if spec.gpus_per_node:
        res["nvidia.com/gpu"] = str(spec.gpus_per_node)
    if spec.network == "efa":
        if not spec.settings.efa_devices:
            raise K8sConfigError(
                PREFIX + "EFA_DEVICES",
                None,
                "the system uses EFA (FI_PROVIDER = efa) but does not say how many EFA devices a pod gets",
                f'set {PREFIX}EFA_DEVICES = "<devices per node>" in global_env_vars (16 on p6-b300.48xlarge)',
            )
        res["vpc.amazonaws.com/efa"] = str(spec.settings.efa_devices)
    res.update(spec.settings.extra_resources)
    return res


def _env(spec: K8sJobSpec, *, node_rank_from_index: bool) -> list[dict[str, Any]]:
    secret_names = {c.env for c in spec.settings.credentials}
    fixed = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"}
    fixed |= {"NODE_RANK"} if node_rank_from_index else set()
    env: list[dict[str, Any]] = []
    if node_rank_from_index:
        # Defined first: later values and the command may refer to $(NODE_RANK).
        ref = {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
        env.append({"name": "NODE_RANK", "valueFrom": {"fieldRef": ref}})
    for name, value in spec.env.items():
        if not _ENV_NAME.match(name):
            raise K8sConfigError(f"env {name!r}", value, "not a valid environment variable name", "rename it")
        if name in secret_names:
            raise K8sConfigError(
                f"env {name}", "<value>", f"also comes from a Secret ({PREFIX}CREDENTIALS)", "set it in one place"
            )
        if name not in fixed:
            env.append({"name": name, "value": escape(value)})
    user_path = spec.env.get("PYTHONPATH")
    env += [
        {"name": "PYTHONPATH", "value": PAYLOAD_ROOT + (f":{escape(user_path)}" if user_path else "")},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},  # the payload is mounted read-only
        {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": escape(RANK_PREFIX_TEMPLATE)},
    ]
    env += [
        {"name": c.env, "valueFrom": {"secretKeyRef": {"name": c.secret, "key": c.key}}}
        for c in spec.settings.credentials
    ]
    return env


def _torchrun(spec: K8sJobSpec, argv: tuple[str, ...], node_rank: str, master_addr: str, master_port: str) -> list:
    python, *rest = (escape(a) for a in argv)
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.num_nodes}",
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={master_addr}",
        f"--master-port={master_port}",
        f"--log-dir={RESULTS_DIR}/torchrun/node-{node_rank}",
        "--tee=3",
        *rest,
    ]


def _volumes(spec: K8sJobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    s = spec.settings
    items = [{"key": k, "path": path} for k, path in sorted(payload_items(spec).items())]
    volumes: list[dict[str, Any]] = [
        {"name": "payload", "configMap": {"name": spec.configmap_name, "defaultMode": 0o444, "items": items}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": s.shm_size}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "payload", "mountPath": PAYLOAD_ROOT, "readOnly": True},
        {"name": "dshm", "mountPath": SHM_DIR},
    ]
    claims = list(dict.fromkeys([*([s.results_pvc] if s.results_pvc else []), *s.mounts.values()]))
    volume_of = {claim: f"pvc-{i}" for i, claim in enumerate(claims)}
    volumes += [{"name": volume_of[c], "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if s.results_pvc:
        mounts.append({"name": volume_of[s.results_pvc], "mountPath": RESULTS_DIR, "subPath": spec.name})
    else:
        volumes.append({"name": "results", "emptyDir": {}})
        mounts.append({"name": "results", "mountPath": RESULTS_DIR})
    mounts += [{"name": volume_of[c], "mountPath": path} for path, c in sorted(s.mounts.items())]
    return volumes, mounts


def _pod_template(
    spec: K8sJobSpec,
    step: PodStep,
    container_name: str,
    command: list[str],
    env: list[dict[str, Any]],
    *,
    subdomain: str | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    s = spec.settings
    volumes, mounts = _volumes(spec)
    resources = _resources(spec)
    container: dict[str, Any] = {
        "name": container_name,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "workingDir": RESULTS_DIR,
        "env": env,
        "resources": {"limits": dict(resources), "requests": dict(resources)},
        "volumeMounts": mounts,
    }
    if ports:
        container["ports"] = ports
    if spec.network in ("efa", "ib"):
        # RDMA registers (pins) memory: the verbs/libfabric providers need a raised memlock limit.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if subdomain:
        pod["subdomain"] = subdomain
    if spec.host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    if s.node_selector:
        pod["nodeSelector"] = dict(s.node_selector)
    if s.tolerations:
        pod["tolerations"] = [dict(t) for t in s.tolerations]
    if s.service_account:
        pod["serviceAccountName"] = s.service_account
    if s.scheduler_name:
        pod["schedulerName"] = s.scheduler_name
    if s.priority_class:
        pod["priorityClassName"] = s.priority_class
    if spec.time_limit_s:
        pod["activeDeadlineSeconds"] = spec.time_limit_s  # counted from the pod's start, like Slurm's limit
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, JOB_LABEL: spec.name, ROLE_LABEL: step.role}
    return {"metadata": {"labels": {**labels, **spec.labels}}, "spec": pod}


def _pre_step_job(spec: K8sJobSpec, step: PodStep) -> dict[str, Any]:
    name = f"{spec.name}-{step.role}"
    command = [escape(a) for a in step.argv]
    template = _pod_template(spec, step, step.role, command, _env(spec, node_rank_from_index=False))
    annotations = {WAIT_ANNOTATION: "true"} if step.wait else None
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(spec, name, annotations),
        "spec": {"completions": 1, "parallelism": 1, "backoffLimit": 0, "template": template},
    }


def _indexed_job(spec: K8sJobSpec) -> list[dict[str, Any]]:
    step = spec.main
    port = spec.settings.master_port
    master = f"{spec.name}-0.{spec.name}"  # pod 0's hostname under the headless Service (subdomain)
    command = _torchrun(spec, step.argv, "$(NODE_RANK)", master, str(port))
    env = _env(spec, node_rank_from_index=True)
    template = _pod_template(spec, step, step.role, command, env, subdomain=spec.name)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, spec.name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # pods are never "ready" (no probe): publish them at once
            "selector": {JOB_LABEL: spec.name, ROLE_LABEL: step.role},
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(spec, spec.name),
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.num_nodes,
            "parallelism": spec.num_nodes,
            "backoffLimit": 0,  # static rendezvous: a replaced pod could not rejoin, so one failure ends the job
            "template": template,
        },
    }
    return [service, job]


def _pytorchjob(spec: K8sJobSpec) -> list[dict[str, Any]]:
    step = spec.main
    command = _torchrun(spec, step.argv, "$(RANK)", "$(MASTER_ADDR)", "$(MASTER_PORT)")
    env = _env(spec, node_rank_from_index=False)
    ports = [{"name": PYTORCHJOB_PORT_NAME, "containerPort": spec.settings.master_port, "protocol": "TCP"}]

    def replica(count: int) -> dict[str, Any]:
        template = _pod_template(spec, step, PYTORCHJOB_CONTAINER, command, env, ports=ports)
        return {"replicas": count, "restartPolicy": "Never", "template": template}

    replicas = {"Master": replica(1)}
    if spec.num_nodes > 1:
        replicas["Worker"] = replica(spec.num_nodes - 1)
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": _meta(spec, spec.name),
            "spec": {
                "nprocPerNode": str(spec.nproc_per_node),
                # Pods stay after the end so the runner can read their logs; it deletes the job afterwards.
                "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
                "pytorchReplicaSpecs": replicas,
            },
        }
    ]


def render_objects(spec: K8sJobSpec) -> list[dict[str, Any]]:
    """Every object of the job, in the order to create them."""
    if not _DNS1035_LABEL.match(spec.name) or len(spec.name) > NAME_LIMIT:
        raise K8sConfigError("job name", spec.name, "not a DNS-1035 label of at most 40 characters", "use job_name()")
    check_namespace(spec.namespace)
    if not spec.image or spec.image != spec.image.strip():
        raise K8sConfigError(
            "cmd_args.container_image",
            spec.image,
            "Kubernetes needs an image without leading or trailing whitespace",
            'set container_image = "<registry>/<image>:<tag>" in the test',
        )
    if spec.num_nodes < 1 or spec.nproc_per_node < 1:
        raise K8sConfigError("num_nodes", spec.num_nodes, "must be at least 1 node and 1 process", "fix the test")
    if not spec.steps or not spec.main.torchrun or any(s.torchrun for s in spec.steps[:-1]):
        raise K8sConfigError("steps", [s.role for s in spec.steps], "need pre-steps then one torchrun step", "fix")
    data = configmap_data(spec)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(spec, spec.configmap_name),
            "immutable": True,
            "data": data,
        }
    ]
    objects += [_pre_step_job(spec, step) for step in spec.steps[:-1]]
    objects += _pytorchjob(spec) if spec.settings.kind == "pytorchjob" else _indexed_job(spec)
    return objects
