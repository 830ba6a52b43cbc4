"""Offline validation of generated Kubernetes objects: upstream JSON schemas (strict), the PyTorchJob CRD made strict,
and the rules no schema of them expresses (enums, cross-object references, secrets). Every check lists every error.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from kubernetes_validate import utils as kv

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "k8s"
PYTORCHJOB_SCHEMA = FIXTURES / "kubeflow.org_pytorchjobs.v1.openapi.json"
K8S_VERSIONS = ("1.29", "1.31", "1.33")  # what EKS supports in 2026 (standard + extended support)
DEFAULT_VERSION = "1.31"

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)", re.IGNORECASE)
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "busybox"}
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")


# ---------------------------------------------------------------------------------------------------------------
# Schemas


def _schema_dir(version: str) -> str:
    known = [v for v in kv.all_versions() if kv.major_minor(v) == version]
    assert known, f"kubernetes-validate has no schemas for {version}"
    return f"kubernetes-json-schema/v{known[-1]}-local-strict"


@cache
def _registry(version: str) -> referencing.Registry:
    defs = kv.schema_contents(f"{_schema_dir(version)}/_definitions.json", version)
    return referencing.Resource.from_contents(defs) @ referencing.Registry()


def _definition(version: str, name: str) -> dict[str, Any]:
    return {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{name}"}


def _errors(schema: dict[str, Any], registry: referencing.Registry, instance: Any, where: str) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [
        f"{where}: {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]


def strict_crd_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """additionalProperties: false on every object schema that declares properties and allows nothing else."""
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(out)
    return out


@cache
def _pytorchjob_schema() -> dict[str, Any]:
    schema = strict_crd_schema(json.loads(PYTORCHJOB_SCHEMA.read_text()))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def schema_errors(obj: dict[str, Any], version: str = DEFAULT_VERSION) -> list[str]:
    """Every error of ``obj`` against the strict upstream schema; an unknown kind is an error, never a skip."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')} (k8s {version})"
    registry = _registry(version)
    if obj.get("apiVersion") == "kubeflow.org/v1" and obj.get("kind") == "PyTorchJob":
        errors = _errors(_pytorchjob_schema(), registry, obj, where)
        # The CRD leaves metadata and the pod templates' metadata open: hold them to the core schemas too.
        meta = _definition(version, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        errors += _errors(meta, registry, obj.get("metadata"), f"{where} metadata")
        template = _definition(version, "io.k8s.api.core.v1.PodTemplateSpec")
        for rtype, replica in (obj.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
            errors += _errors(template, registry, replica.get("template"), f"{where} {rtype}.template")
        return errors
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", str(obj.get("apiVersion")))
    path = f"{_schema_dir(version)}/{str(obj.get('kind')).lower()}-{api_version}.json"
    try:
        schema = kv.schema_contents(path, version)
    except FileNotFoundError:
        return [f"{where}: schema not found ({path}): unknown kind/apiVersion"]
    return _errors(schema, registry, obj, where)


# ---------------------------------------------------------------------------------------------------------------
# What the schemas cannot say


def _meta_errors(obj: dict[str, Any], where: str) -> list[str]:
    errors = []
    meta = obj.get("metadata", {})
    name, kind = meta.get("name", ""), obj.get("kind")
    rule = DNS1035_LABEL if kind in ("Service", "PyTorchJob") else DNS1123_LABEL
    if not rule.match(name) or len(name) > 63:
        errors.append(f"{where}: metadata.name {name!r} is not a valid {kind} name")
    if not DNS1123_LABEL.match(meta.get("namespace", "")):
        errors.append(f"{where}: metadata.namespace {meta.get('namespace')!r} is not a namespace name")
    errors += _label_errors(meta.get("labels") or {}, f"{where} metadata.labels")
    for key in meta.get("annotations") or {}:
        if not _label_key_ok(key):
            errors.append(f"{where}: annotation key {key!r} is invalid")
    return errors


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    prefix_ok = not prefix or all(DNS1123_LABEL.match(p) for p in prefix.split("."))
    return prefix_ok and len(name) <= 63 and bool(QUALIFIED.match(name))


def _label_errors(labels: dict[str, Any], where: str) -> list[str]:
    errors = []
    for k, v in labels.items():
        if not _label_key_ok(k):
            errors.append(f"{where}: label key {k!r} is invalid")
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errors.append(f"{where}: label value {v!r} of {k} is invalid")
    return errors


def _one_of(value: Any, allowed: Iterable[Any], what: str, where: str) -> list[str]:
    allowed = tuple(allowed)
    return [] if value in allowed else [f"{where}: {what} = {value!r} is not one of {allowed}"]


def _container_errors(c: dict[str, Any], volumes: set[str], where: str) -> list[str]:
    errors: list[str] = []
    if not DNS1123_LABEL.match(c.get("name", "")):
        errors.append(f"{where}: container name {c.get('name')!r} is invalid")
    image = c.get("image", "")
    if not image or image != image.strip():
        errors.append(f"{where}: image {image!r} is empty or has surrounding whitespace")
    errors += _one_of(c.get("imagePullPolicy", "IfNotPresent"), ("Always", "IfNotPresent", "Never"), "pull", where)
    command = c.get("command") or []
    if not command or not isinstance(command, list):
        errors.append(f"{where}: command must be an argv list")
    elif Path(command[0]).name in SHELLS or "-c" in command:
        errors.append(f"{where}: command runs a shell: {command[:3]}")
    res = c.get("resources", {})
    limits, requests = res.get("limits", {}), res.get("requests", {})
    if str(limits.get("nvidia.com/gpu")) != str(requests.get("nvidia.com/gpu")):
        errors.append(f"{where}: nvidia.com/gpu limits {limits.get('nvidia.com/gpu')} != requests")
    for name, qty in limits.items():
        if "/" in name and str(requests.get(name, qty)) != str(qty):
            errors.append(f"{where}: extended resource {name}: requests must equal limits")
    names = [e.get("name") for e in c.get("env", [])]
    if len(names) != len(set(names)):
        errors.append(f"{where}: duplicate env names {sorted(n for n in names if names.count(n) > 1)}")
    for e in c.get("env", []):
        n = e.get("name", "")
        if not ENV_NAME.match(n):
            errors.append(f"{where}: env name {n!r} is invalid")
        if ("value" in e) == ("valueFrom" in e):
            errors.append(f"{where}: env {n} needs exactly one of value / valueFrom")
        if SECRET_NAME.search(n) and not (e.get("valueFrom") or {}).get("secretKeyRef"):
            errors.append(f"{where}: env {n} looks like a credential but is not a secretKeyRef")
    for p in c.get("ports", []):
        errors += _one_of(p.get("protocol", "TCP"), ("TCP", "UDP", "SCTP"), "port protocol", where)
    for m in c.get("volumeMounts", []):
        if m.get("name") not in volumes:
            errors.append(f"{where}: volumeMount {m.get('name')} refers to no volume")
    paths = [m.get("mountPath") for m in c.get("volumeMounts", [])]
    if len(paths) != len(set(paths)):
        errors.append(f"{where}: duplicate mountPath")
    return errors


def _pod_errors(template: dict[str, Any], objects: list[dict[str, Any]], where: str) -> list[str]:
    spec = template.get("spec", {})
    errors = _label_errors((template.get("metadata") or {}).get("labels") or {}, f"{where} template labels")
    errors += _one_of(spec.get("restartPolicy", "Always"), ("Always", "OnFailure", "Never"), "restartPolicy", where)
    errors += _one_of(
        spec.get("dnsPolicy", "ClusterFirst"),
        ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"),
        "dnsPolicy",
        where,
    )
    vols = spec.get("volumes", [])
    vol_names = [v.get("name") for v in vols]
    if len(vol_names) != len(set(vol_names)):
        errors.append(f"{where}: duplicate volume names")
    configmaps = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap"}
    for v in vols:
        if not DNS1123_LABEL.match(v.get("name", "")):
            errors.append(f"{where}: volume name {v.get('name')!r} is invalid")
        if "emptyDir" in v:
            errors += _one_of(v["emptyDir"].get("medium", ""), ("", "Memory", "HugePages"), "emptyDir.medium", where)
        if "configMap" in v:
            cm = configmaps.get(v["configMap"].get("name"))
            if cm is None:
                errors.append(
                    f"{where}: volume {v['name']} mounts ConfigMap {v['configMap'].get('name')} not generated"
                )
            else:
                missing = [i["key"] for i in v["configMap"].get("items", []) if i["key"] not in cm.get("data", {})]
                if missing:
                    errors.append(f"{where}: ConfigMap items {missing} are not in {cm['metadata']['name']}")
    for t in spec.get("tolerations", []):
        errors += _one_of(t.get("operator", "Equal"), ("Exists", "Equal"), "toleration operator", where)
        errors += _one_of(t.get("effect", ""), ("", "NoSchedule", "PreferNoSchedule", "NoExecute"), "effect", where)
    containers = spec.get("containers", [])
    if not containers:
        errors.append(f"{where}: no containers")
    cnames = [c.get("name") for c in containers]
    if len(cnames) != len(set(cnames)):
        errors.append(f"{where}: duplicate container names")
    for c in containers:
        errors += _container_errors(c, set(vol_names), f"{where} container {c.get('name')}")
    return errors


def _job_errors(obj: dict[str, Any], objects: list[dict[str, Any]], where: str) -> list[str]:
    spec = obj.get("spec", {})
    template = spec.get("template", {})
    errors = _pod_errors(template, objects, where)
    pod = template.get("spec", {})
    errors += _one_of(pod.get("restartPolicy"), ("Never", "OnFailure"), "Job pod restartPolicy", where)
    errors += _one_of(spec.get("completionMode", "NonIndexed"), ("NonIndexed", "Indexed"), "completionMode", where)
    if spec.get("completionMode") == "Indexed":
        if spec.get("completions") != spec.get("parallelism") or not spec.get("completions"):
            errors.append(f"{where}: Indexed Job needs completions == parallelism (one pod per node)")
        if spec.get("backoffLimit") != 0:
            errors.append(f"{where}: static rendezvous needs backoffLimit 0, got {spec.get('backoffLimit')}")
        subdomain = pod.get("subdomain")
        services = [o for o in objects if o.get("kind") == "Service" and o["metadata"]["name"] == subdomain]
        if not services:
            errors.append(f"{where}: pod subdomain {subdomain!r} names no generated headless Service")
        else:
            selector = services[0]["spec"].get("selector", {})
            labels = template.get("metadata", {}).get("labels", {})
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                errors.append(f"{where}: Service {subdomain} does not select the Job's pods")
    if spec.get("podFailurePolicy") and pod.get("restartPolicy") != "Never":
        errors.append(f"{where}: podFailurePolicy needs restartPolicy Never")
    return errors


def _service_errors(obj: dict[str, Any], where: str) -> list[str]:
    spec = obj.get("spec", {})
    errors = []
    if spec.get("clusterIP") != "None":
        errors.append(f"{where}: the rendezvous Service must be headless (clusterIP None)")
    if spec.get("publishNotReadyAddresses") is not True:
        errors.append(f"{where}: publishNotReadyAddresses must be true (pods have no readiness probe)")
    for p in spec.get("ports", []):
        errors += _one_of(p.get("protocol", "TCP"), ("TCP", "UDP", "SCTP"), "protocol", where)
    return errors


def _configmap_errors(obj: dict[str, Any], where: str) -> list[str]:
    data = obj.get("data", {})
    errors = [f"{where}: ConfigMap key {k!r} is invalid" for k in data if not CONFIG_KEY.match(k)]
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > 1024 * 1024:
        errors.append(f"{where}: ConfigMap data is {size} bytes, over 1 MiB")
    return errors


def _pytorchjob_errors(obj: dict[str, Any], objects: list[dict[str, Any]], where: str) -> list[str]:
    """The training operator's webhook rules (training-operator v1.9.0 pkg/webhooks/pytorch) and enum values."""
    spec = obj.get("spec", {})
    replicas = spec.get("pytorchReplicaSpecs") or {}
    errors = []
    if not replicas:
        errors.append(f"{where}: pytorchReplicaSpecs is required")
    for rtype, r in replicas.items():
        w = f"{where} {rtype}"
        errors += _one_of(rtype, ("Master", "Worker"), "replica type", w)
        errors += _one_of(r.get("restartPolicy"), ("Always", "OnFailure", "Never", "ExitCode"), "restartPolicy", w)
        if rtype == "Master" and r.get("replicas") != 1:
            errors.append(f"{w}: Master replicas must be 1")
        if rtype == "Worker" and (r.get("replicas") or 0) < 1:
            errors.append(f"{w}: Worker replicas must be at least 1")
        containers = r.get("template", {}).get("spec", {}).get("containers", [])
        if not any(c.get("name") == "pytorch" for c in containers):
            errors.append(f"{w}: needs a container named 'pytorch'")
        errors += _pod_errors(r.get("template", {}), objects, w)
        if not any(p.get("name") == "pytorchjob-port" for c in containers for p in c.get("ports", [])):
            errors.append(f"{w}: no container port 'pytorchjob-port' (the operator's MASTER_PORT source)")
        gpus = {c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu") for c in containers}
        if gpus - {None} and spec.get("nprocPerNode") not in gpus:
            errors.append(f"{w}: nprocPerNode {spec.get('nprocPerNode')} differs from the GPUs per pod {gpus}")
    run_policy = spec.get("runPolicy", {})
    errors += _one_of(run_policy.get("cleanPodPolicy", "None"), ("All", "Running", "None"), "cleanPodPolicy", where)
    return errors


def semantic_errors(objects: list[dict[str, Any]]) -> list[str]:
    errors: list[str] = []
    names = [(o.get("kind"), o.get("metadata", {}).get("name")) for o in objects]
    if len(names) != len(set(names)):
        errors.append(f"duplicate objects: {names}")
    checks: dict[str, Callable[[dict[str, Any], str], list[str]]] = {
        "Job": lambda o, w: _job_errors(o, objects, w),
        "Service": _service_errors,
        "ConfigMap": _configmap_errors,
        "PyTorchJob": lambda o, w: _pytorchjob_errors(o, objects, w),
    }
    for obj in objects:
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        errors += _meta_errors(obj, where)
        check = checks.get(obj.get("kind", ""))
        errors += check(obj, where) if check else [f"{where}: unexpected kind"]
    return errors


def all_errors(objects: list[dict[str, Any]], versions: Iterable[str] = K8S_VERSIONS) -> list[str]:
    errors = [e for v in versions for o in objects for e in schema_errors(o, v)]
    return errors + semantic_errors(objects)


# ---------------------------------------------------------------------------------------------------------------
# What the kubelet does to command and env values (k8s.io/kubernetes third_party/forked/golang/expansion)


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2 : close]
                    out.append(env.get(name, f"$({name})"))
                    i = close + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_view(container: dict[str, Any], injected: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """argv and plain env values as the process sees them (secretKeyRef/fieldRef values are ``injected``)."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = kubelet_expand(e["value"], env)
        else:
            env[e["name"]] = injected.get(e["name"], f"<from {next(iter(e['valueFrom']))}>")
    argv = [kubelet_expand(a, {**injected, **env}) for a in container.get("command", [])]
    return argv, env


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") == "Job":
        return obj["spec"]["template"]["spec"]["containers"]
    if obj.get("kind") == "PyTorchJob":
        return [c for r in obj["spec"]["pytorchReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]]
    return []
