"""Every rule the Kubernetes API server applies to a name, key or short value that cloudai-mbridge puts into a
manifest, each with the source line it transcribes; and ``manifest_problems``, which runs them over rendered objects.

Sources (Apache-2.0), read at kubernetes/apimachinery eed236c (2026-07-23) and kubernetes/kubernetes master:

    AM   k8s.io/apimachinery/pkg/util/validation/validation.go
    CT   k8s.io/apimachinery/pkg/api/validate/content/kube.go        (label keys and values, moved here from AM)
    OM   k8s.io/apimachinery/pkg/api/validation/objectmeta.go
    GN   k8s.io/apimachinery/pkg/api/validation/generic.go
    CORE k8s.io/kubernetes/pkg/apis/core/validation/validation.go   (cited by function: its lines move every release)
    KF   kubeflow/training-operator pkg/webhooks/pytorchjob/pytorchjob_webhook.go validatePyTorchJob

Lengths are bytes (Go's ``len`` of a string). Every pattern is anchored as Go's ``^...$`` is: ``\\Z``, never ``$``
(Python's ``$`` also matches before a final newline).

Environment variable names follow the strict rule, ``IsEnvVarName`` (AM 368-385): every API server takes those.
Newer servers (feature gate RelaxedEnvironmentVariableValidation: beta and on by default from 1.32) also take any
printable ASCII but '=' (``IsRelaxedEnvVarName``, AM 388-402); a manifest that relies on it fails on older clusters,
and Slurm's shell would not export such a name either, so we do not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

DNS1123_LABEL_MAX = 63  # AM 161 DNS1123LabelMaxLength
DNS1123_SUBDOMAIN_MAX = 253  # AM 191 DNS1123SubdomainMaxLength
DNS1035_LABEL_MAX = 63  # AM 226 DNS1035LabelMaxLength
LABEL_NAME_MAX = 63  # CT 28 labelKeyMaxLength
LABEL_VALUE_MAX = 63  # CT 78 LabelValueMaxLength
PORT_NAME_MAX = 15  # AM 322 IsValidPortName: "no more than 15 characters" (IANA_SVC_NAME, RFC 6335)
ANNOTATIONS_MAX = 256 * 1024  # OM 39 TotalAnnotationSizeLimitB = 256 * (1 << 10), keys + values
CONFIG_KEY_MAX = DNS1123_SUBDOMAIN_MAX  # AM 413 IsConfigMapKey: len(value) > DNS1123SubdomainMaxLength

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")  # AM 155 dns1123LabelFmt
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")  # AM 184
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # AM 222 dns1035LabelFmt
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")  # CT 24-26 labelKeyFmt
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")  # CT 74 labelValueFmt
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")  # AM 405 configMapKeyFmt
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")  # AM 368 envVarNameFmt
PORT_NAME_CHARS = re.compile(r"[-a-z0-9]+\Z")  # AM 316 portNameCharsetRegex
PORT_NAME_LETTER = re.compile(r"[a-z]")  # AM 317 portNameOneLetterRegexp


def _size(text: str) -> int:
    return len(text.encode())


def _too_long(text: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters (it has {_size(text)})"] if _size(text) > limit else []


def _chdir_prefix(text: str) -> list[str]:
    """AM 457 hasChDirPrefix: the name of a file the kubelet writes must not climb out of its folder."""
    if text in (".", ".."):
        return [f"must not be '{text}'"]
    return ["must not start with '..'"] if text.startswith("..") else []


def dns1123_label(text: str) -> list[str]:
    """AM 167 IsDNS1123Label: namespaces, container and volume names, a pod's subdomain and hostname."""
    errs = _too_long(text, DNS1123_LABEL_MAX)
    if not DNS1123_LABEL.match(text):
        errs.append("must be lowercase letters, digits and '-', starting and ending with a letter or digit"
                    + (" (no '.')" if DNS1123_SUBDOMAIN.match(text) else ""))
    return errs


def dns1123_subdomain(text: str) -> list[str]:
    """AM 198 IsDNS1123Subdomain (GN 43 NameIsDNSSubdomain): most object names, Secret and ConfigMap names, service
    account, priority class and scheduler names, label-key prefixes."""
    errs = _too_long(text, DNS1123_SUBDOMAIN_MAX)
    if not DNS1123_SUBDOMAIN.match(text):
        errs.append("must be lowercase letters, digits, '-' and '.', each dot-separated part starting and ending "
                    "with a letter or digit")
    return errs


def dns1035_label(text: str) -> list[str]:
    """AM 232 IsDNS1035Label (GN 59 NameIsDNS1035Label): Service names (CORE ValidateServiceName), PyTorchJob
    names (KF validatePyTorchJob)."""
    errs = _too_long(text, DNS1035_LABEL_MAX)
    if not DNS1035_LABEL.match(text):
        errs.append("must be lowercase letters, digits and '-', starting with a letter and ending with a letter or "
                    "digit")
    return errs


def label_key(text: str) -> list[str]:
    """CT 43-72 IsLabelKey (= IsQualifiedName): label keys, node-selector keys, taint keys, annotation keys (OM 51,
    lowercased first), resource names: [prefix/]name, prefix a DNS-1123 subdomain, name 63 characters."""
    parts = text.split("/")
    if len(parts) > 2:
        return ["must be a name with at most one '/' (an optional DNS subdomain prefix, e.g. example.com/name)"]
    errs: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in dns1123_subdomain(prefix)]
    name = parts[-1]
    if not name:
        errs.append("name part must be non-empty")
    else:
        errs += [f"name part {m}" for m in _too_long(name, LABEL_NAME_MAX)]
        if not LABEL_NAME.match(name):
            errs.append("name part must be letters, digits, '-', '_' and '.', starting and ending with a letter or "
                        "digit")
    return errs


def label_value(text: str) -> list[str]:
    """CT 85 IsLabelValue: label values, node-selector values, taint values; empty is allowed."""
    errs = _too_long(text, LABEL_VALUE_MAX)
    if not LABEL_VALUE.match(text):
        errs.append("must be empty or letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
    return errs


def annotation_key(text: str) -> list[str]:
    """OM 47-53 ValidateAnnotations: IsQualifiedName of the key lowercased."""
    return label_key(text.lower())


def config_key(text: str) -> list[str]:
    """AM 411-420 IsConfigMapKey: the data keys of a ConfigMap or Secret, a secretKeyRef's or configMapKeyRef's key
    (CORE validateSecretKeySelector) and a configMap volume item's key."""
    if not text:
        return ["must be non-empty"]
    errs = _too_long(text, CONFIG_KEY_MAX)
    if not CONFIG_KEY.match(text):
        errs.append("must be letters, digits, '-', '_' and '.'")
    return errs + _chdir_prefix(text)


def env_name(text: str) -> list[str]:
    """AM 377-385 IsEnvVarName (CORE ValidateEnv, strict mode): see the module's note on the relaxed rule."""
    errs = [] if ENV_NAME.match(text) else ["must be letters, digits, '_', '-' and '.', not starting with a digit"]
    return errs + _chdir_prefix(text)


def port_name(text: str) -> list[str]:
    """AM 321-339 IsValidPortName (IANA_SVC_NAME): a container port's name (CORE validateContainerPorts)."""
    errs = _too_long(text, PORT_NAME_MAX)
    if not PORT_NAME_CHARS.match(text):
        errs.append("must be lowercase letters, digits and '-'")
    if not PORT_NAME_LETTER.search(text):
        errs.append("must contain at least one letter")
    if "--" in text:
        errs.append("must not contain '--'")
    if text.startswith("-") or text.endswith("-"):
        errs.append("must not begin or end with '-'")
    return errs


def port_number(value: object) -> list[str]:
    """AM 271 IsValidPortNum: 1..65535."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535
    return [] if ok else ["must be a whole number from 1 to 65535"]


def annotations_size(annotations: Mapping[str, str]) -> list[str]:
    """OM 61-70 ValidateAnnotationsSize: keys + values of one object's annotations, 256 KiB together."""
    total = sum(_size(k) + _size(v) for k, v in annotations.items())
    return [f"annotations take {total} bytes, over the {ANNOTATIONS_MAX} the API server allows"] \
        if total > ANNOTATIONS_MAX else []


@dataclass(frozen=True)
class Rule:
    what: str  # what the value must be, in words: "a DNS-1123 subdomain"
    check: Callable[[str], list[str]]
    source: str
    fix: str


RULES: dict[str, Rule] = {
    "dns1123-label": Rule("a DNS-1123 label", dns1123_label, "AM 167 IsDNS1123Label",
                          "use at most 63 lowercase letters, digits and '-'"),
    "dns1123-subdomain": Rule("a DNS-1123 subdomain", dns1123_subdomain, "AM 198 IsDNS1123Subdomain",
                              "use at most 253 lowercase letters, digits, '-' and '.'"),
    "dns1035-label": Rule("a DNS-1035 label", dns1035_label, "AM 232 IsDNS1035Label",
                          "use at most 63 lowercase letters, digits and '-', starting with a letter"),
    "label-key": Rule("a label key", label_key, "CT 43 IsLabelKey",
                      "write [<dns-subdomain>/]<name>, the name at most 63 letters, digits, '-', '_', '.'"),
    "label-value": Rule("a label value", label_value, "CT 85 IsLabelValue",
                        "use at most 63 letters, digits, '-', '_' and '.'"),
    "annotation-key": Rule("an annotation key", annotation_key, "OM 47 ValidateAnnotations",
                           "write [<dns-subdomain>/]<name>, the name at most 63 letters, digits, '-', '_', '.'"),
    "config-key": Rule("a ConfigMap/Secret key", config_key, "AM 411 IsConfigMapKey",
                       "use at most 253 letters, digits, '-', '_' and '.', not '.', '..' nor starting with '..'"),
    "env-name": Rule("an environment variable name", env_name, "AM 377 IsEnvVarName",
                     "use letters, digits and '_' (a letter or '_' first)"),
    "port-name": Rule("a port name (IANA_SVC_NAME)", port_name, "AM 321 IsValidPortName",
                      "use at most 15 lowercase letters, digits and single '-', with at least one letter"),
    "port-number": Rule("a port number", port_number, "AM 271 IsValidPortNum", "use a port from 1 to 65535"),
    "annotations-size": Rule("within the annotations' size limit", lambda _: [], "OM 61 ValidateAnnotationsSize",
                             "shorten the annotations"),
}


def problems_of(rule: str, text: object) -> list[str]:
    if rule == "port-number":
        return port_number(text)
    if not isinstance(text, str):
        return ["must be a string"]
    return RULES[rule].check(text)


@dataclass(frozen=True)
class Problem:
    where: str  # "Job x-0-1a2b: spec.template.spec.containers[0].env[3].name"
    value: object
    rule: str
    problems: tuple[str, ...]

    @property
    def text(self) -> str:
        r = RULES.get(self.rule)
        what = f"not {r.what} ({r.source})" if r else self.rule
        return f"{what}: {'; '.join(self.problems)}"

    @property
    def fix(self) -> str:
        r = RULES.get(self.rule)
        return r.fix if r else "change the setting that produced it"


# The rule of metadata.name, by kind: GN 43/59 through CORE ValidateConfigMapName / ValidateServiceName, batch's
# ValidateJob (ValidateObjectMeta with NameIsDNSSubdomain) and KF.
NAME_RULE = {"ConfigMap": "dns1123-subdomain", "Secret": "dns1123-subdomain", "Service": "dns1035-label",
             "Job": "dns1123-subdomain", "PyTorchJob": "dns1035-label"}


def manifest_problems(objects: list[Mapping[str, Any]]) -> list[Problem]:
    """Every name, key and short value of ``objects`` that the API server would refuse, with where it is."""
    found: list[Problem] = []
    for obj in objects:
        meta = obj.get("metadata", {})
        head = f"{obj.get('kind')} {meta.get('name')}"

        def need(rule: str, path: str, value: object, _head: str = head) -> None:
            errs = problems_of(rule, value)
            if errs:
                found.append(Problem(f"{_head}: {path}", value, rule, tuple(errs)))

        need(NAME_RULE.get(str(obj.get("kind")), "dns1123-subdomain"), "metadata.name", meta.get("name"))
        if "namespace" in meta:
            need("dns1123-label", "metadata.namespace", meta["namespace"])  # GN 69 ValidateNamespaceName
        if obj.get("kind") == "Job" and meta.get("name"):
            # the job controller labels every pod batch.kubernetes.io/job-name=<name> (a label value)
            need("label-value", "metadata.name (as the pods' job-name label)", meta["name"])
        _labels(need, "metadata", meta)
        for key in obj.get("data") or {}:
            need("config-key", f"data[{key!r}]", key)
        spec = obj.get("spec") or {}
        for key, value in (spec.get("selector") or {}).items():
            if isinstance(value, str):  # a Service's selector is labels; a Job's is a LabelSelector (none here)
                need("label-key", f"spec.selector[{key!r}]", key)
                need("label-value", f"spec.selector[{key!r}]", value)
        for i, port in enumerate(spec.get("ports") or []):
            if "name" in port:  # CORE validateServicePort: a Service port's name is a DNS-1123 label
                need("dns1123-label", f"spec.ports[{i}].name", port["name"])
            for num in ("port", "targetPort"):
                if num in port:
                    need("port-number", f"spec.ports[{i}].{num}", port[num])
        for path, template in _templates(obj):
            _pod(need, path, template, obj)
        size = annotations_size(meta.get("annotations") or {})
        if size:
            found.append(Problem(f"{head}: metadata.annotations", "<annotations>", "annotations-size", tuple(size)))
    return found


def _labels(need: Callable[..., None], path: str, meta: Mapping[str, Any]) -> None:
    for key, value in (meta.get("labels") or {}).items():
        need("label-key", f"{path}.labels[{key!r}]", key)
        need("label-value", f"{path}.labels[{key!r}]", value)
    for key in meta.get("annotations") or {}:
        need("annotation-key", f"{path}.annotations[{key!r}]", key)


def _templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    spec = obj.get("spec") or {}
    if "template" in spec:
        yield "spec.template", spec["template"]
    for role, replica in (spec.get("pytorchReplicaSpecs") or {}).items():
        yield f"spec.pytorchReplicaSpecs.{role}.template", replica.get("template") or {}


def _pod(need: Callable[..., None], path: str, template: Mapping[str, Any], obj: Mapping[str, Any]) -> None:
    _labels(need, f"{path}.metadata", template.get("metadata") or {})
    pod = template.get("spec") or {}
    p = f"{path}.spec"
    if "subdomain" in pod:
        need("dns1123-label", f"{p}.subdomain", pod["subdomain"])  # CORE ValidatePodSpec
        job = obj.get("metadata", {}).get("name", "")
        if obj.get("kind") == "Job" and obj.get("spec", {}).get("completionMode") == "Indexed":
            # the job controller names pod i's host <job>-<i> (a DNS-1123 label, CORE ValidatePodSpec hostname)
            need("dns1123-label", f"{p}.hostname of the last pod", f"{job}-{max(obj['spec']['completions'] - 1, 0)}")
    for field_name in ("serviceAccountName", "schedulerName", "priorityClassName"):
        if field_name in pod:  # CORE ValidatePodSpec: each a DNS-1123 subdomain
            need("dns1123-subdomain", f"{p}.{field_name}", pod[field_name])
    for key, value in (pod.get("nodeSelector") or {}).items():  # CORE ValidatePodSpec -> ValidateLabels
        need("label-key", f"{p}.nodeSelector[{key!r}]", key)
        need("label-value", f"{p}.nodeSelector[{key!r}]", value)
    for i, tol in enumerate(pod.get("tolerations") or []):  # CORE ValidateTolerations
        if tol.get("key"):
            need("label-key", f"{p}.tolerations[{i}].key", tol["key"])
        if tol.get("operator", "Equal") == "Equal":
            need("label-value", f"{p}.tolerations[{i}].value", tol.get("value", ""))
    volumes = set()
    for i, vol in enumerate(pod.get("volumes") or []):  # CORE ValidateVolumes
        need("dns1123-label", f"{p}.volumes[{i}].name", vol.get("name"))
        volumes.add(vol.get("name"))
        if "configMap" in vol:
            need("dns1123-subdomain", f"{p}.volumes[{i}].configMap.name", vol["configMap"].get("name"))
            for j, item in enumerate(vol["configMap"].get("items") or []):
                need("config-key", f"{p}.volumes[{i}].configMap.items[{j}].key", item.get("key"))
        if "persistentVolumeClaim" in vol:  # the claim must exist, and a PVC's name is a DNS-1123 subdomain
            need("dns1123-subdomain", f"{p}.volumes[{i}].persistentVolumeClaim.claimName",
                 vol["persistentVolumeClaim"].get("claimName"))
    for c_i, ctr in enumerate(pod.get("containers") or []):
        c = f"{p}.containers[{c_i}]"
        need("dns1123-label", f"{c}.name", ctr.get("name"))  # CORE validateContainerCommon
        for i, port in enumerate(ctr.get("ports") or []):  # CORE validateContainerPorts
            if "name" in port:
                need("port-name", f"{c}.ports[{i}].name", port["name"])
            need("port-number", f"{c}.ports[{i}].containerPort", port.get("containerPort"))
        for i, var in enumerate(ctr.get("env") or []):  # CORE ValidateEnv
            need("env-name", f"{c}.env[{i}].name", var.get("name"))
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref is not None:  # CORE validateSecretKeySelector
                need("dns1123-subdomain", f"{c}.env[{i}].valueFrom.secretKeyRef.name", ref.get("name"))
                need("config-key", f"{c}.env[{i}].valueFrom.secretKeyRef.key", ref.get("key"))
        for name in (ctr.get("resources") or {}).get("limits") or {}:  # CORE validateContainerResourceName
            need("label-key", f"{c}.resources.limits[{name!r}]", name)
