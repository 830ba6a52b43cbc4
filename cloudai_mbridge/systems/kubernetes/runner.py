"""CloudAI's Kubernetes runner and system, extended for jobs made of several objects, and usable without a cluster.

What CloudAI's own KubernetesSystem/KubernetesRunner (1.6) cannot do for us, and what this module changes:

- ``KubernetesSystem.model_post_init`` loads the kubeconfig while the system TOML is parsed: no kubeconfig, no
  dry-run. ``MBridgeKubernetesSystem`` connects on first use of an API client instead, so a dry-run never needs
  one, and validates our CLOUDAI_MBRIDGE_K8S_* settings at parse time (a bad one is a system-file error that names
  the key). It is a system type of its own, ``scheduler = "mbridge_kubernetes"`` (SCHEDULER), beside CloudAI's
  ``"kubernetes"``, which the plugin leaves as it is: a CloudAI system file keeps CloudAI's system, runner and
  strategies. CloudAI looks strategies up by the exact system type; our runner looks along the system's class
  hierarchy, so CloudAI's own workloads run on our system type with CloudAI's strategies, uncopied.
- It creates a single batch/v1 Job, MPIJob or DynamoGraphDeployment, and reads logs of pods labelled
  ``training.kubeflow.org/job-name``. ``MBridgeKubernetesRunner`` creates every object of our jobs (ConfigMap,
  pre-step Job, Service + Indexed Job, or PyTorchJob) in order, waits for pre-steps, watches the main workload,
  collects the log of every pod into ``<output>/logs/`` (pod-<i>.log, rank-<R>.log split from torchrun's line
  prefix, <role>.log for pre-steps) and ``stdout.txt``, and deletes everything afterwards.
- Its dry-run still reads logs and deletes the job on the cluster. Ours writes the manifests (strategy.py) and
  touches nothing else. Built-in test definitions keep CloudAI's behaviour unchanged.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cloudai.core import BaseJob, JobStatusResult, JsonGenStrategy, Registry, System, TestDefinition, TestRun
from cloudai.systems.kubernetes import KubernetesJob, KubernetesRunner, KubernetesSystem
from pydantic import field_validator

from ...atomic import write_atomic
from ...launch.kubernetes import (
    COMPLETION_INDEX,
    JOB_LABEL,
    RANK_PREFIX,
    ROLE_LABEL,
    SCHEDULER,
    WAIT_ANNOTATION,
    K8sConfigError,
    parse_settings,
)
from .strategy import MBridgeKubernetesStrategy

WORKLOAD_KINDS = ("Job", "PyTorchJob")
PYTORCHJOB_API = {"group": "kubeflow.org", "version": "v1", "plural": "pytorchjobs"}
# Waiting reasons no retry will cure: the image name is wrong, or a Secret/ConfigMap the pod needs is missing.
FATAL_WAITING = ("InvalidImageName", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError")
RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"


class MBridgeKubernetesSystem(KubernetesSystem):
    """KubernetesSystem that connects on first use (not at parse time) and drives MBridgeKubernetesJob."""

    scheduler: str = SCHEDULER

    # Optional, so system files can leave it out: given as "~/.kube/config", CloudAI's verify-configs writes its dummy
    # kubeconfig under a folder literally named "~" in the working directory.
    kube_config_path: Path = Path("~/.kube/config")

    @field_validator("global_env_vars")
    @classmethod
    def _settings(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            parse_settings(v)
        except K8sConfigError as e:
            raise ValueError(str(e)) from None
        return v

    def model_post_init(self, _context: Any = None) -> None:
        pass

    def __deepcopy__(self, _memo: dict[int, Any] | None = None) -> MBridgeKubernetesSystem:
        new = type(self)(**self.__getstate__())
        new._core_v1, new._batch_v1, new._custom_objects_api = self._core_v1, self._batch_v1, self._custom_objects_api
        return new

    def _connect(self) -> None:
        if self._core_v1 is not None:
            return
        from kubernetes import client, config

        path = Path(self.kube_config_path).expanduser()
        if path.is_file():
            config.load_kube_config(config_file=str(path))
        elif os.environ.get("KUBECONFIG"):
            config.load_kube_config()  # the client reads KUBECONFIG (a list of files) itself
        elif (Path.home() / ".kube" / "config").is_file():
            config.load_kube_config(config_file=str(Path.home() / ".kube" / "config"))
        else:
            raise FileNotFoundError(
                f"Kube config file '{self.kube_config_path}' not found, KUBECONFIG unset, no ~/.kube/config: a run "
                "needs the cluster's kubeconfig (aws eks update-kubeconfig writes ~/.kube/config); dry-run does not."
            )
        self._core_v1 = client.CoreV1Api()
        self._batch_v1 = client.BatchV1Api()
        self._custom_objects_api = client.CustomObjectsApi()

    @property
    def core_v1(self) -> Any:
        self._connect()
        return self._core_v1

    @property
    def batch_v1(self) -> Any:
        self._connect()
        return self._batch_v1

    @property
    def custom_objects_api(self) -> Any:
        self._connect()
        return self._custom_objects_api

    def is_job_running(self, job: BaseJob) -> bool:
        if isinstance(job, MBridgeKubernetesJob):
            return Cluster(self).poll(job) == RUNNING
        return super().is_job_running(job)

    def is_job_completed(self, job: BaseJob) -> bool:
        if isinstance(job, MBridgeKubernetesJob):
            return Cluster(self).poll(job) != RUNNING
        return super().is_job_completed(job)

    def kill(self, job: BaseJob) -> None:
        if isinstance(job, MBridgeKubernetesJob):
            Cluster(self).finish(job)
            return
        super().kill(job)


@dataclass
class MBridgeKubernetesJob(KubernetesJob):
    """The objects of one job, how many of them exist on the cluster, and where the job stands."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    created: int = 0
    state: str = RUNNING
    message: str = ""
    finished: bool = False

    @property
    def namespace(self) -> str:
        return self.objects[0]["metadata"]["namespace"]

    @property
    def current(self) -> dict[str, Any]:
        """The workload (Job / PyTorchJob) created last: the one whose end the job waits for now."""
        return next(o for o in reversed(self.objects[: self.created]) if o["kind"] in WORKLOAD_KINDS)

    @property
    def main_role(self) -> str:
        main = next(o for o in reversed(self.objects) if o["kind"] in WORKLOAD_KINDS)
        return _pod_labels(main)[ROLE_LABEL]


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    if workload["kind"] == "PyTorchJob":
        return workload["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]
    return workload["spec"]["template"]["metadata"]["labels"]


def _status(e: Exception) -> int | None:
    return getattr(e, "status", None)


class Cluster:
    """The API calls for our jobs, through the clients of any KubernetesSystem (CloudAI's or ours)."""

    def __init__(self, system: KubernetesSystem) -> None:
        self.system = system

    def create(self, obj: dict[str, Any]) -> None:
        ns, kind = obj["metadata"]["namespace"], obj["kind"]
        if kind == "ConfigMap":
            self.system.core_v1.create_namespaced_config_map(namespace=ns, body=obj)
        elif kind == "Service":
            self.system.core_v1.create_namespaced_service(namespace=ns, body=obj)
        elif kind == "Job":
            self.system.batch_v1.create_namespaced_job(namespace=ns, body=obj)
        elif kind == "PyTorchJob":
            self.system.custom_objects_api.create_namespaced_custom_object(namespace=ns, body=obj, **PYTORCHJOB_API)
        else:
            raise ValueError(f"cloudai-mbridge cannot create a {kind}")
        logging.debug("created %s/%s in %s", kind, obj["metadata"]["name"], ns)

    def delete(self, obj: dict[str, Any]) -> None:
        ns, kind, name = obj["metadata"]["namespace"], obj["kind"], obj["metadata"]["name"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            if kind == "ConfigMap":
                self.system.core_v1.delete_namespaced_config_map(name=name, namespace=ns)
            elif kind == "Service":
                self.system.core_v1.delete_namespaced_service(name=name, namespace=ns)
            elif kind == "Job":
                self.system.batch_v1.delete_namespaced_job(name=name, namespace=ns, body=body)
            elif kind == "PyTorchJob":
                self.system.custom_objects_api.delete_namespaced_custom_object(
                    name=name, namespace=ns, body=body, **PYTORCHJOB_API
                )
        except Exception as e:
            if _status(e) != 404:
                logging.error("could not delete %s/%s in %s: %s", kind, name, ns, e)

    def start(self, job: MBridgeKubernetesJob) -> None:
        """Create objects in order up to (and including) the next one that must finish before the rest."""
        while job.created < len(job.objects):
            obj = job.objects[job.created]
            self.create(obj)
            job.created += 1
            if obj["metadata"].get("annotations", {}).get(WAIT_ANNOTATION) == "true":
                return

    def workload_state(self, obj: dict[str, Any]) -> tuple[str, str]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            if obj["kind"] == "PyTorchJob":
                status = self.system.custom_objects_api.get_namespaced_custom_object(
                    name=name, namespace=ns, **PYTORCHJOB_API
                ).get("status", {})
                conditions = [
                    (c.get("type"), c.get("status"), c.get("message", "")) for c in status.get("conditions") or []
                ]
                done, fail = "Succeeded", "Failed"
            else:
                status = self.system.batch_v1.read_namespaced_job_status(name=name, namespace=ns).status
                conditions = [(c.type, c.status, c.message or c.reason or "") for c in status.conditions or []]
                done, fail = "Complete", "Failed"
        except Exception as e:
            if _status(e) == 404:
                return FAILED, f"{obj['kind']} {name} disappeared from namespace {ns}"
            raise
        for ctype, cstatus, message in conditions:
            if ctype == fail and cstatus == "True":
                return FAILED, f"{obj['kind']} {name} failed: {message}"
            if ctype == done and cstatus == "True":
                return SUCCEEDED, ""
        return RUNNING, ""

    def pods(self, job: MBridgeKubernetesJob) -> list[Any]:
        found = self.system.core_v1.list_namespaced_pod(
            namespace=job.namespace, label_selector=f"{JOB_LABEL}={job.name}"
        )
        return list(found.items or [])

    def stuck(self, job: MBridgeKubernetesJob) -> str | None:
        for pod in self.pods(job):
            for cs in (pod.status and pod.status.container_statuses) or []:
                waiting = cs.state and cs.state.waiting
                if waiting and waiting.reason in FATAL_WAITING:
                    return f"pod {pod.metadata.name}: {waiting.reason}: {waiting.message or ''}".strip()
        return None

    def poll(self, job: MBridgeKubernetesJob) -> str:
        """Advance the job: running -> next stage / succeeded / failed. Safe to call any number of times."""
        while job.state == RUNNING:
            state, message = self.workload_state(job.current)
            if state == RUNNING:
                problem = self.stuck(job)
                if problem:
                    job.state, job.message = FAILED, problem
                break
            if state == FAILED:
                job.state, job.message = FAILED, message
            elif job.created < len(job.objects):
                self.start(job)
            else:
                job.state = SUCCEEDED
        return job.state

    def collect_logs(self, job: MBridgeKubernetesJob) -> None:
        out = job.test_run.output_path
        logs = out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        main_role = job.main_role
        main_logs: list[tuple[int, str]] = []
        for order, pod in enumerate(self.pods(job)):
            labels = pod.metadata.labels or {}
            role = labels.get(ROLE_LABEL, "pod")
            index = _pod_index(pod, order)
            try:
                text = self.system.core_v1.read_namespaced_pod_log(name=pod.metadata.name, namespace=job.namespace)
            except Exception as e:
                logging.warning("no log for pod %s: %s", pod.metadata.name, e)
                continue
            if role == main_role:
                write_atomic(logs / f"pod-{index}.log", text)
                main_logs.append((index, text))
            else:
                write_atomic(logs / (f"{role}.log" if index == 0 else f"{role}-{index}.log"), text)
        main_logs.sort()
        split_rank_logs(logs, (text for _, text in main_logs))
        write_atomic(out / "stdout.txt", "".join(text for _, text in main_logs))

    def finish(self, job: MBridgeKubernetesJob) -> None:
        """Collect every pod's log, then delete every object created (newest first). Runs once."""
        if job.finished:
            return
        job.finished = True
        try:
            self.collect_logs(job)
        finally:
            for obj in reversed(job.objects[: job.created]):
                self.delete(obj)


def _pod_index(pod: Any, default: int) -> int:
    meta = pod.metadata
    labels, annotations = meta.labels or {}, meta.annotations or {}
    index = labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX))
    if index is not None:
        return int(index)
    replica_type = labels.get("training.kubeflow.org/replica-type", "").lower()
    replica_index = labels.get("training.kubeflow.org/replica-index")
    if replica_type and replica_index is not None:
        return int(replica_index) + (1 if replica_type == "worker" else 0)
    return default


def split_rank_logs(logs: Path, texts: Any) -> None:
    """torchrun --tee prefixes every line of global rank R with "[rankR]:": one file per rank, prefix removed."""
    per_rank: dict[int, list[str]] = {}
    for text in texts:
        for line in text.splitlines(keepends=True):
            m = RANK_PREFIX.match(line)
            if m:
                per_rank.setdefault(int(m.group(1)), []).append(line[m.end() :])
    for rank, lines in per_rank.items():
        write_atomic(logs / f"rank-{rank}.log", "".join(lines))


def json_gen_strategy_class(system_type: type[System], tdef_type: type[TestDefinition]) -> type[JsonGenStrategy]:
    """Registry lookup along the system's class hierarchy (CloudAI's is keyed by the exact type)."""
    strategies = Registry().json_gen_strategies_map
    for cls in system_type.__mro__:
        if (cls, tdef_type) in strategies:
            return strategies[(cls, tdef_type)]
    raise KeyError(f"JSON gen strategy for '{system_type.__name__}, {tdef_type.__name__}' not found.")


class MBridgeKubernetesRunner(KubernetesRunner):
    """CloudAI's KubernetesRunner, plus multi-object jobs for MBridge* tests and a dry-run that needs no cluster."""

    def get_json_gen_strategy(self, system: System, test_run: TestRun) -> JsonGenStrategy:
        return json_gen_strategy_class(type(system), type(test_run.test))(system, test_run)

    def _is_ours(self, tr: TestRun) -> bool:
        try:
            return issubclass(json_gen_strategy_class(type(self.system), type(tr.test)), MBridgeKubernetesStrategy)
        except KeyError:
            return False

    def _submit_test(self, tr: TestRun) -> KubernetesJob:
        if not self._is_ours(tr):
            return super()._submit_test(tr)
        tr.output_path = self.get_job_output_path(tr)
        strategy = cast(MBridgeKubernetesStrategy, self.get_json_gen_strategy(self.system, tr))
        objects = strategy.gen_objects()
        main = next(o for o in reversed(objects) if o["kind"] in WORKLOAD_KINDS)
        name = main["metadata"]["name"]
        job = MBridgeKubernetesJob(tr, id=name, name=name, kind=main["kind"].lower(), objects=objects)
        if self.mode != "run":
            logging.info(
                "%s: %d Kubernetes objects written to %s/k8s (not created)", tr.name, len(objects), tr.output_path
            )
            job.state, job.finished = SUCCEEDED, True  # nothing exists on a cluster: nothing to collect or delete
            return job
        cluster = Cluster(cast(KubernetesSystem, self.system))
        try:
            cluster.start(job)
        except Exception as e:
            for obj in reversed(objects[: job.created]):
                cluster.delete(obj)
            raise RuntimeError(f"{tr.name}: creating {name} in namespace {job.namespace} failed: {e}") from e
        logging.info("%s: created %s %s in namespace %s", tr.name, main["kind"], name, job.namespace)
        return job

    def on_job_completion(self, job: BaseJob) -> None:
        if not isinstance(job, MBridgeKubernetesJob):
            super().on_job_completion(job)
        elif self.mode == "run":
            Cluster(cast(KubernetesSystem, self.system)).finish(job)
            if job.state == FAILED:
                logging.error("%s: %s", job.test_run.name, job.message)

    def kill_job(self, job: BaseJob) -> None:
        if not isinstance(job, MBridgeKubernetesJob):
            super().kill_job(job)
        elif self.mode == "run":
            Cluster(cast(KubernetesSystem, self.system)).finish(job)

    def get_runner_job_status(self, job: BaseJob) -> JobStatusResult:
        if isinstance(job, MBridgeKubernetesJob) and job.state == FAILED:
            return JobStatusResult(is_successful=False, error_message=job.message)
        return super().get_runner_job_status(job)


def register_kubernetes(reg: Registry) -> None:
    """Scheduler "mbridge_kubernetes": our system and runner. CloudAI's "kubernetes" entries are not touched, and no
    installer is registered for ours (CloudAI's BaseInstaller serves; its KubernetesInstaller only adds a kubeconfig
    check, which a dry-run must not need)."""
    reg.update_system(SCHEDULER, MBridgeKubernetesSystem)
    reg.update_runner(SCHEDULER, MBridgeKubernetesRunner)
