"""MBridgeKubernetesRunner and MBridgeKubernetesSystem with the real CloudAI runner loop.

There is no Kubernetes cluster here. The run-mode tests replace the cluster's API, and only that, by FakeApi: it
records create/read/delete calls, keeps the objects, makes the pods a Job or PyTorchJob controller would make, and
serves their logs (real `kubernetes` client model objects). Everything else (parsing, the runner's monitor loop,
generation, log collection, deletion) is the real code. Dry-run tests use no fake at all: loading a kubeconfig is
made to fail, and the system's clients must stay unset.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import toml
from k8s_cases import EKS, SMALL_TEST, k8s_system, make_test_run, system_toml
from kubernetes.client import (
    ApiException,
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Job,
    V1JobCondition,
    V1JobStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodList,
    V1PodStatus,
    V1Status,
)

from cloudai_mbridge.launch.kubernetes import COMPLETION_INDEX, PREFIX, ROLE_LABEL

TERMINAL = {"Job": ("Complete", "Failed"), "PyTorchJob": ("Succeeded", "Failed")}


class FakeApi:
    """CoreV1Api + BatchV1Api + CustomObjectsApi of a cluster that runs every workload for ``polls`` status reads."""

    def __init__(self, polls: int = 2, fail: str | None = None, waiting: tuple[str, str] | None = None) -> None:
        self.polls, self.fail, self.waiting = polls, fail, waiting
        self.calls: list[tuple[str, str, str]] = []
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: dict[str, int] = {}

    # --- create / delete -------------------------------------------------------------------------------------
    def _create(self, kind: str, namespace: str, body: Any) -> None:
        body = body if isinstance(body, dict) else body.to_dict()
        assert body["kind"] == kind and body["metadata"]["namespace"] == namespace
        key = (kind, body["metadata"]["name"])
        if key in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.objects[key] = copy.deepcopy(body)
        self.calls.append(("create", kind, key[1]))

    def _delete(self, kind: str, name: str) -> None:
        self.calls.append(("delete", kind, name))
        if self.objects.pop((kind, name), None) is None:
            raise ApiException(status=404, reason="NotFound")

    def create_namespaced_config_map(self, namespace: str, body: Any) -> None:
        self._create("ConfigMap", namespace, body)

    def create_namespaced_service(self, namespace: str, body: Any) -> None:
        self._create("Service", namespace, body)

    def create_namespaced_job(self, namespace: str, body: Any) -> V1Job:
        self._create("Job", namespace, body)
        return V1Job(metadata=V1ObjectMeta(name=body["metadata"]["name"]), status=V1JobStatus())

    def create_namespaced_custom_object(self, group, version, namespace, plural, body) -> dict:
        assert (group, version, plural) == ("kubeflow.org", "v1", "pytorchjobs")
        self._create("PyTorchJob", namespace, body)
        return body

    def delete_namespaced_config_map(self, name: str, namespace: str) -> None:
        self._delete("ConfigMap", name)

    def delete_namespaced_service(self, name: str, namespace: str) -> None:
        self._delete("Service", name)

    def delete_namespaced_job(self, name: str, namespace: str, body: Any = None) -> V1Status:
        self._delete("Job", name)
        return V1Status(status="Success")

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None) -> None:
        self._delete("PyTorchJob", name)

    # --- status ------------------------------------------------------------------------------------------------
    def _condition(self, kind: str, name: str) -> tuple[str, str] | None:
        self.calls.append(("read", kind, name))
        self.reads[name] = self.reads.get(name, 0) + 1
        if self.reads[name] < self.polls:
            return None
        role = _template_labels(self.objects[(kind, name)])[0].get(ROLE_LABEL)
        done, failed = TERMINAL[kind]
        return (failed, "BackoffLimitExceeded: pod 1 exited with 1") if role == self.fail else (done, "")

    def read_namespaced_job_status(self, name: str, namespace: str) -> V1Job:
        if ("Job", name) not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        cond = self._condition("Job", name)
        conditions = [V1JobCondition(type=cond[0], status="True", message=cond[1] or None)] if cond else None
        return V1Job(metadata=V1ObjectMeta(name=name), status=V1JobStatus(conditions=conditions))

    def get_namespaced_custom_object(self, group, version, namespace, plural, name) -> dict:
        cond = self._condition("PyTorchJob", name)
        conditions = [{"type": "Created", "status": "True"}]
        if cond:
            conditions.append({"type": cond[0], "status": "True", "message": cond[1]})
        return {**self.objects[("PyTorchJob", name)], "status": {"conditions": conditions}}

    # --- pods --------------------------------------------------------------------------------------------------
    def _pods(self) -> list[V1Pod]:
        pods = []
        for (kind, name), obj in self.objects.items():
            for i, (labels, notes, container) in enumerate(_pod_shapes(kind, obj)):
                state = None
                if self.waiting:
                    state = V1ContainerState(
                        waiting=V1ContainerStateWaiting(reason=self.waiting[0], message=self.waiting[1])
                    )
                status = V1ContainerStatus(
                    name=container, image="img", image_id="", ready=False, restart_count=0, state=state
                )
                meta = V1ObjectMeta(name=f"{name}-{i}-x7k2p", labels=labels, annotations=notes)
                pods.append(V1Pod(metadata=meta, status=V1PodStatus(container_statuses=[status])))
        return pods

    def list_namespaced_pod(self, namespace: str, label_selector: str | None = None) -> V1PodList:
        self.calls.append(("list", "Pod", label_selector or ""))
        pods = self._pods()
        if label_selector:
            key, value = label_selector.split("=")
            pods = [p for p in pods if p.metadata.labels.get(key) == value]
        return V1PodList(items=pods)

    def read_namespaced_pod_log(self, name: str, namespace: str) -> str:
        self.calls.append(("log", "Pod", name))
        pod = next(p for p in self._pods() if p.metadata.name == name)
        labels = pod.metadata.labels
        if labels.get(ROLE_LABEL) == "convert":
            return "MBRIDGE_CONVERT skip: checkpoint exists\n"
        node = int(labels.get(COMPLETION_INDEX, labels.get("training.kubeflow.org/replica-index", 0)))
        if labels.get("training.kubeflow.org/replica-type") == "worker":
            node += 1
        lines = [f"torchrun agent on node {node}\n"]
        lines += [f"[rank{node * 8 + r}]:hello from rank {node * 8 + r}\n" for r in range(8)]
        return "".join(lines)


def _template_labels(obj: dict[str, Any]) -> list[dict[str, str]]:
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["metadata"]["labels"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "Job":
        return [obj["spec"]["template"].get("metadata", {}).get("labels", {})]
    return [{}]


def _pod_shapes(kind: str, obj: dict[str, Any]) -> list[tuple[dict[str, str], dict[str, str], str]]:
    """The pods the Job / training-operator controllers would make (their labels and annotations)."""
    name = obj["metadata"]["name"]
    if kind == "Job":
        spec = obj["spec"]
        labels = {**_template_labels(obj)[0], "batch.kubernetes.io/job-name": name}
        container = spec["template"]["spec"]["containers"][0]["name"]
        if spec.get("completionMode") == "Indexed":
            return [
                ({**labels, COMPLETION_INDEX: str(i)}, {COMPLETION_INDEX: str(i)}, container)
                for i in range(spec["completions"])
            ]
        return [(labels, {}, container)]
    if kind == "PyTorchJob":
        shapes = []
        for rtype, replica in obj["spec"]["pytorchReplicaSpecs"].items():
            for i in range(replica["replicas"]):
                labels = {
                    **replica["template"]["metadata"]["labels"],
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(i),
                }
                shapes.append((labels, {}, "pytorch"))
        return shapes
    return []


@pytest.fixture(autouse=True)
def _no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig anywhere; loading one fails loudly."""
    import kubernetes.config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a kubeconfig was loaded")

    monkeypatch.setattr(kubernetes.config, "load_kube_config", refuse)


def _run(tmp_path: Path, mode: str, test: dict, nodes: int, fake: FakeApi | None, env: dict[str, str] | None = None):
    """The runner on one test run. The workload's own success check (it parses Megatron's iteration lines, which the
    fake logs do not carry) is left out: job_status_check is off, and the runner's status is asserted instead."""
    from cloudai.core import TestScenario

    from cloudai_mbridge.systems.kubernetes.runner import MBridgeKubernetesRunner

    system = k8s_system(system_toml(tmp_path, EKS, env))
    system.monitor_interval = 0
    if fake is not None:
        system._core_v1 = system._batch_v1 = system._custom_objects_api = fake
    tr = make_test_run(test, nodes, tmp_path / "unused")
    scenario = TestScenario(name="s", test_runs=[tr], job_status_check=False)
    runner = MBridgeKubernetesRunner(mode, system, scenario, tmp_path / "results")
    statuses: list = []
    original = runner.get_runner_job_status

    def record(job):
        statuses.append(original(job))
        return statuses[-1]

    runner.get_runner_job_status = record  # type: ignore[method-assign]
    runner.statuses = statuses  # type: ignore[attr-defined]
    return runner, tr, system


def _created(fake: FakeApi) -> list[tuple[str, str]]:
    return [(kind, name) for verb, kind, name in fake.calls if verb == "create"]


def _deleted(fake: FakeApi) -> list[tuple[str, str]]:
    return [(kind, name) for verb, kind, name in fake.calls if verb == "delete"]


def test_run_creates_watches_collects_and_deletes(tmp_path: Path) -> None:
    fake = FakeApi(polls=3)
    runner, tr, _ = _run(tmp_path, "run", SMALL_TEST, 2, fake)
    runner.run()

    name = next(n for k, n in _created(fake) if k == "Job")
    assert _created(fake) == [("ConfigMap", f"{name}-payload"), ("Service", name), ("Job", name)]
    assert _deleted(fake) == [("Job", name), ("Service", name), ("ConfigMap", f"{name}-payload")]
    assert fake.objects == {}, "nothing is left on the cluster"
    assert fake.reads[name] >= 3
    out = tr.output_path
    logs = out / "logs"
    assert sorted(p.name for p in logs.glob("pod-*.log")) == ["pod-0.log", "pod-1.log"]
    assert sorted(int(p.stem.split("-")[1]) for p in logs.glob("rank-*.log")) == list(range(16))
    assert (logs / "rank-9.log").read_text() == "hello from rank 9\n", "torchrun's prefix is removed"
    assert "torchrun agent on node 1" in (logs / "pod-1.log").read_text()
    assert (out / "stdout.txt").read_text().index("node 0") < (out / "stdout.txt").read_text().index("node 1")
    assert json.loads((out / "k8s" / "objects.json").read_text())["items"][2]["metadata"]["name"] == name
    assert runner.jobs == [] and [st.is_successful for st in runner.statuses] == [True]


def test_pre_step_must_succeed_before_the_training_objects_exist(tmp_path: Path) -> None:
    fake = FakeApi(polls=2)
    sft = {**SMALL_TEST, "cmd_args": {**SMALL_TEST["cmd_args"], "task": "sft", "convert_checkpoint": True}}
    sft["cmd_args"]["checkpoint_dir"] = "/fsx/ckpt/proxy"
    runner, tr, _ = _run(tmp_path, "run", sft, 2, fake)
    runner.run()

    kinds = [(verb, kind, name) for verb, kind, name in fake.calls if verb in ("create", "read")]
    name = next(n for verb, k, n in kinds if k == "Service")
    convert = f"{name}-convert"
    assert _created(fake) == [("ConfigMap", f"{name}-payload"), ("Job", convert), ("Service", name), ("Job", name)]
    last_convert_read = max(i for i, c in enumerate(kinds) if c == ("read", "Job", convert))
    assert kinds.index(("create", "Service", name)) > last_convert_read, "Service created before conversion ended"
    assert fake.reads[convert] == 2, "the conversion is read until Complete, then never again"
    assert _deleted(fake) == [("Job", name), ("Service", name), ("Job", convert), ("ConfigMap", f"{name}-payload")]
    assert (tr.output_path / "logs" / "convert.log").read_text().startswith("MBRIDGE_CONVERT skip")
    assert len(list((tr.output_path / "logs").glob("rank-*.log"))) == 16


def test_a_failed_job_is_reported_and_still_cleaned_up(tmp_path: Path) -> None:
    fake = FakeApi(polls=2, fail="train")
    runner, tr, _ = _run(tmp_path, "run", SMALL_TEST, 2, fake)
    runner.run()
    (status,) = runner.statuses
    assert not status.is_successful and "BackoffLimitExceeded" in status.error_message
    assert fake.objects == {}
    assert (tr.output_path / "logs" / "pod-0.log").is_file(), "logs of a failed job are the most useful ones"


def test_a_pod_that_cannot_start_fails_the_job_with_the_reason(tmp_path: Path) -> None:
    fake = FakeApi(polls=100, waiting=("CreateContainerConfigError", 'secret "hf-token" not found'))
    env = {f"{PREFIX}CREDENTIALS": '{"HF_TOKEN": "hf-token"}'}
    runner, _, _ = _run(tmp_path, "run", SMALL_TEST, 2, fake, env)
    runner.run()
    (status,) = runner.statuses
    assert not status.is_successful
    assert 'CreateContainerConfigError: secret "hf-token" not found' in status.error_message
    assert fake.objects == {}
    assert max(fake.reads.values()) < 5, "a pod that cannot start is not waited for until the time limit"


def test_pytorchjob_run(tmp_path: Path) -> None:
    fake = FakeApi(polls=2)
    runner, tr, _ = _run(tmp_path, "run", SMALL_TEST, 2, fake, {f"{PREFIX}KIND": "pytorchjob"})
    runner.run()
    name = next(n for k, n in _created(fake) if k == "PyTorchJob")
    assert _created(fake) == [("ConfigMap", f"{name}-payload"), ("PyTorchJob", name)]
    assert _deleted(fake) == [("PyTorchJob", name), ("ConfigMap", f"{name}-payload")]
    logs = tr.output_path / "logs"
    assert sorted(p.name for p in logs.glob("pod-*.log")) == ["pod-0.log", "pod-1.log"]
    assert (logs / "rank-15.log").read_text() == "hello from rank 15\n"


def test_dry_run_touches_no_cluster(tmp_path: Path) -> None:
    runner, tr, system = _run(tmp_path, "dry-run", SMALL_TEST, 2, None)
    runner.run()
    assert system._core_v1 is None and system._batch_v1 is None and system._custom_objects_api is None
    assert len(json.loads((tr.output_path / "k8s" / "objects.json").read_text())["items"]) == 3
    assert not (tr.output_path / "logs").exists()
    tr.current_iteration = 1  # a fresh run folder
    runner.submit_test(tr)
    runner.shutdown()  # Ctrl-C during a dry-run: still no cluster call
    assert system._core_v1 is None


def test_system_parses_without_kubeconfig_where_cloudais_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from cloudai.systems.kubernetes import KubernetesSystem

    from cloudai_mbridge.systems.kubernetes.runner import MBridgeKubernetesSystem

    system = k8s_system(EKS)
    assert type(system) is MBridgeKubernetesSystem
    data = {**toml.load(EKS), "kube_config_path": "~/.kube/config"}
    with pytest.raises(FileNotFoundError, match="Kube config file"):
        KubernetesSystem(**data)  # what the plugin works around: CloudAI loads the kubeconfig while parsing
    clone = copy.deepcopy(system)
    assert type(clone) is MBridgeKubernetesSystem and clone.global_env_vars == system.global_env_vars
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(FileNotFoundError, match="dry-run does not"):
        _ = system.core_v1


def test_builtin_workloads_keep_cloudais_kubernetes_path(tmp_path: Path) -> None:
    from cloudai.systems.kubernetes import KubernetesJob

    from cloudai_mbridge.systems.kubernetes.runner import MBridgeKubernetesJob

    fake = FakeApi(polls=1)
    sleep = {"name": "sleep", "description": "d", "test_template_name": "Sleep", "cmd_args": {"seconds": 1}}
    runner, tr, _ = _run(tmp_path, "run", sleep, 1, fake)
    assert not runner._is_ours(tr)
    runner.run()
    job = [c for c in fake.calls if c[0] == "create"]
    assert job == [("create", "Job", "sleep")]
    assert ("delete", "Job", "sleep") in fake.calls
    assert ("list", "Pod", "") in fake.calls, "CloudAI's own log collection ran"
    assert issubclass(MBridgeKubernetesJob, KubernetesJob)


def test_an_earlier_runs_folder_is_never_overwritten(tmp_path: Path) -> None:
    from cloudai_mbridge.launch.payload import ResultsExistError

    runner, tr, _ = _run(tmp_path, "dry-run", SMALL_TEST, 2, None)
    runner.run()
    first = (tr.output_path / "k8s" / "objects.json").read_text()
    strategy = runner.get_json_gen_strategy(runner.system, tr)
    with pytest.raises(ResultsExistError, match="refusing to overwrite"):
        strategy.gen_json()
    assert (tr.output_path / "k8s" / "objects.json").read_text() == first
