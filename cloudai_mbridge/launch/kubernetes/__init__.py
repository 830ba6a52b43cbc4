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

Limits (validation.py): what the API server or the container would refuse is refused here, naming the field, e.g.
an environment string over execve's MAX_ARG_STRLEN, an object over etcd's request limit, a tolerationSeconds beyond
int64 (the manifests' YAML quoting is systems/kubernetes/strategy.py's to_yaml).

Modules: validation.py (constants, K8sConfigError, names and values), knobs.py (the CLOUDAI_MBRIDGE_K8S_* settings),
objects.py (a K8sJobSpec -> its objects). Everything public is importable from here.
"""

from __future__ import annotations

from .knobs import (
    KINDS,
    KNOBS,
    Credential,
    K8sSettings,
    parse_settings,
)
from .objects import (
    K8sJobSpec,
    PodStep,
    configmap_data,
    configmap_key,
    payload_items,
    render_objects,
)
from .validation import (
    COMPLETION_INDEX,
    CONFIG_NAME,
    CONFIG_PATH,
    CONFIGMAP_LIMIT,
    JOB_LABEL,
    MANAGED_BY,
    NAME_LIMIT,
    PAYLOAD_PACKAGE,
    PAYLOAD_ROOT,
    PREFIX,
    PYTORCHJOB_CONTAINER,
    PYTORCHJOB_PORT_NAME,
    RANK_PREFIX,
    RANK_PREFIX_TEMPLATE,
    RESULTS_DIR,
    ROLE_LABEL,
    SHM_DIR,
    TEST_LABEL,
    WAIT_ANNOTATION,
    K8sConfigError,
    check_namespace,
    escape,
    is_dns1123_subdomain,
    is_label_key,
    job_name,
    label_value,
    time_limit_seconds,
)

__all__ = [
    "COMPLETION_INDEX",
    "CONFIGMAP_LIMIT",
    "CONFIG_NAME",
    "CONFIG_PATH",
    "JOB_LABEL",
    "KINDS",
    "KNOBS",
    "MANAGED_BY",
    "NAME_LIMIT",
    "PAYLOAD_PACKAGE",
    "PAYLOAD_ROOT",
    "PREFIX",
    "PYTORCHJOB_CONTAINER",
    "PYTORCHJOB_PORT_NAME",
    "RANK_PREFIX",
    "RANK_PREFIX_TEMPLATE",
    "RESULTS_DIR",
    "ROLE_LABEL",
    "SHM_DIR",
    "TEST_LABEL",
    "WAIT_ANNOTATION",
    "Credential",
    "K8sConfigError",
    "K8sJobSpec",
    "K8sSettings",
    "PodStep",
    "check_namespace",
    "configmap_data",
    "configmap_key",
    "escape",
    "is_dns1123_subdomain",
    "is_label_key",
    "job_name",
    "label_value",
    "parse_settings",
    "payload_items",
    "render_objects",
    "time_limit_seconds",
]

# The system files of the plugin's Kubernetes system type say ``scheduler = "mbridge_kubernetes"``; CloudAI's own
# ``"kubernetes"`` keeps CloudAI's system and runner (systems/kubernetes/runner.py says why).
SCHEDULER = "mbridge_kubernetes"
