"""The objects of one job (ConfigMap, pre-step Jobs, Service + Indexed Job or PyTorchJob) from a K8sJobSpec."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..envnames import reserved_env_name
from .apirules import manifest_problems, problems_of
from .knobs import K8sSettings
from .validation import (
    COMPLETION_INDEX,
    CONFIG_NAME,
    CONFIGMAP_LIMIT,
    JOB_LABEL,
    MANAGED_BY,
    MAX_INDEXED_PARALLELISM,
    NAME_LIMIT,
    OBJECT_BUDGET,
    OBJECT_LIMIT,
    PAYLOAD_PACKAGE,
    PAYLOAD_ROOT,
    PREFIX,
    PYTORCHJOB_CONTAINER,
    PYTORCHJOB_PORT_NAME,
    RANK_PREFIX_TEMPLATE,
    RESULTS_DIR,
    ROLE_LABEL,
    SHM_DIR,
    WAIT_ANNOTATION,
    K8sConfigError,
    check_exec_string,
    check_namespace,
    escape,
    is_env_name,
    shown,
)


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
    env_origin: Mapping[str, str] = field(default_factory=dict)  # name -> where it was set, for error messages

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
    payload_items(spec)  # paths first: a '..' part is named as a path, not as a key
    for key in data:
        errs = problems_of("config-key", key)  # apirules: AM 411 IsConfigMapKey
        if errs:
            raise K8sConfigError("payload file", key, f"not a valid ConfigMap key ({'; '.join(errs)})",
                                 "rename the payload file")
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
    for name, qty in spec.settings.extra_resources.items():
        if name in res:  # what the plan sets (knobs._extra_resources refuses these when the system file is read)
            raise K8sConfigError(
                f"{PREFIX}EXTRA_RESOURCES[{name!r}]", qty,
                f"cloudai-mbridge sets {name} itself for this point (to {res[name]}); a value here would override it",
                f"remove {name!r} from {PREFIX}EXTRA_RESOURCES in the system file")
        res[name] = qty
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
        where = spec.env_origin.get(name, f"env {name}")
        if not is_env_name(name):
            raise K8sConfigError(where, shown(value), "not a valid environment variable name", "rename it")
        reserved = reserved_env_name(name)
        if reserved:  # the same names as on Slurm (launch/envnames.py): a file works on both or on neither
            raise K8sConfigError(where, "<value>", reserved[0], reserved[1])
        if name in secret_names:
            raise K8sConfigError(
                f"env {name}", "<value>", f"also comes from a Secret ({PREFIX}CREDENTIALS)", "set it in one place"
            )
        if name not in fixed:
            check_exec_string(where, name, value, "shorten it, or put the text in a file on a mounted volume")
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
    if problems_of("dns1035-label", spec.name) or len(spec.name) > NAME_LIMIT:
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
    if spec.num_nodes > MAX_INDEXED_PARALLELISM:
        raise K8sConfigError(
            "num_nodes",
            spec.num_nodes,
            f"over the {MAX_INDEXED_PARALLELISM} pods a job may run at once",
            "fix the test",
        )
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
    for obj in objects:
        check_object_size(obj)
    check_manifest(objects)
    return objects


def check_manifest(objects: list[dict[str, Any]]) -> None:
    """The last gate: every name, key and label of the objects against the API server's rules (apirules.py). The
    settings were checked where they were read, naming the setting; this names the object and field of anything
    that still slipped through."""
    found = manifest_problems(objects)
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise K8sConfigError(first.where, shown(first.value), first.text + more, first.fix)


def check_object_size(obj: Mapping[str, Any]) -> None:
    """Refuse an object the API server could not store (its JSON as the client sends it, against OBJECT_BUDGET)."""
    size = len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())
    if size > OBJECT_BUDGET:
        raise K8sConfigError(
            f"{obj['kind']} {obj['metadata']['name']}",
            f"{size} bytes",
            f"over the {OBJECT_BUDGET} bytes an object may take (etcd stores at most {OBJECT_LIMIT} bytes a request, "
            "less what the API server adds)",
            "shorten the environment values (global_env_vars, extra_env_vars): every pod template repeats them",
        )
