"""cloudai-mbridge dry-run on Kubernetes systems, through the real CLI, on a machine with no cluster and no kubeconfig.

Every generated object must pass the upstream Kubernetes JSON schemas in strict mode (kubernetes-validate, several
Kubernetes versions, every error listed, an unknown kind is a failure), the PyTorchJob CRD made strict, and the
explicit rules in k8s_checks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import CONF, write_case
from k8s_cases import EKS, GENERIC, k8s_dry_run, manifest_dirs, no_cluster_env, read_objects, system_toml
from k8s_checks import all_errors, container_view, containers

from cloudai_mbridge.launch.kubernetes import KNOBS, PREFIX, configmap_key
from cloudai_mbridge.launch.payload import payload_files


def _job(objects: list[dict]) -> dict:
    return next(o for o in reversed(objects) if o["kind"] in ("Job", "PyTorchJob"))


def _assert_valid_point(k8s_dir: Path) -> list[dict]:
    objects = read_objects(k8s_dir)
    assert all_errors(objects) == []
    yamls = sorted(k8s_dir.glob("*.yaml"))
    assert [yaml.safe_load(p.read_text()) for p in yamls] == objects, "one YAML per object, same as objects.json"
    run_dir = k8s_dir.parent
    configmap = objects[0]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["data"]["mbridge_config.json"] == (run_dir / "mbridge_config.json").read_text()
    staged = {configmap_key(k): v for k, v in payload_files(run_dir / "mbridge_payload").items()}
    assert {k: v for k, v in configmap["data"].items() if k.endswith(".py")} == staged, "the payload that ran"
    for c in containers(_job(objects)):
        names = {e["name"] for e in c["env"]}
        assert not any(n.startswith(PREFIX) for n in names), "control settings must not reach the pods"
    return objects


def test_kimi_k2_ab_on_eks_without_cluster_or_kubeconfig(tmp_path: Path) -> None:
    res = k8s_dry_run(EKS, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", tmp_path)
    assert res.returncode == 0, res.output
    dirs = manifest_dirs(res.output_dir)
    assert len(dirs) == 8, res.output
    # the closing list names the manifests a user applies, not only the payload's config
    listed = [ln for ln in res.output.splitlines() if ln.startswith("[INFO]   kimi_k2_dispatcher_ab/0/")]
    assert len(listed) == 8 and all("k8s/00-configmap-" in ln and "k8s/02-job-" in ln for ln in listed), listed
    cells = set()
    for k8s_dir in dirs:
        objects = _assert_valid_point(k8s_dir)
        assert [o["kind"] for o in objects] == ["ConfigMap", "Service", "Job"]
        service, job = objects[1], objects[2]
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
            "Indexed",
            32,
            32,
            0,
        )
        pod = spec["template"]["spec"]
        assert pod["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
        assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p6-b300.48xlarge"}
        assert pod["activeDeadlineSeconds"] == 7200
        (c,) = pod["containers"]
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16"}
        assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
        argv, env = container_view(c, {"NODE_RANK": "5"})
        name = job["metadata"]["name"]
        assert argv[:10] == [
            "python3",
            "-m",
            "torch.distributed.run",
            "--nnodes=32",
            "--nproc-per-node=8",
            "--node-rank=5",
            f"--master-addr={name}-0.{name}",
            "--master-port=29500",
            "--log-dir=/results/torchrun/node-5",
            "--tee=3",
        ]
        assert argv[10:] == ["-m", "mbridge_payload.train", "--config", "/opt/cloudai-mbridge/mbridge_config.json"]
        assert env["FI_PROVIDER"] == "efa" and env["PYTHONPATH"] == "/opt/cloudai-mbridge"
        assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"
        config = json.loads(objects[0]["data"]["mbridge_config.json"])
        assert config["output_dir"] == "/results" and config["world_size"] == 256
        cells.add((config["dispatcher"], config["mbs"], config["moe_a2a_overlap"]))
    assert len(cells) == 8
    assert not (tmp_path / "home" / ".kube").exists(), "dry-run must not create a kubeconfig"


def test_sft_on_eks_converts_first_on_the_shared_volume(tmp_path: Path) -> None:
    res = k8s_dry_run(EKS, CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path)
    assert res.returncode == 0, res.output
    (k8s_dir,) = manifest_dirs(res.output_dir)
    objects = _assert_valid_point(k8s_dir)
    assert [o["kind"] for o in objects] == ["ConfigMap", "Job", "Service", "Job"]
    convert = objects[1]
    assert convert["metadata"]["annotations"]["cloudai-mbridge/wait-for-completion"] == "true"
    assert convert["spec"]["completions"] == 1 and "completionMode" not in convert["spec"]
    (c,) = containers(convert)
    assert c["command"] == [
        "python3",
        "-m",
        "mbridge_payload.convert",
        "--config",
        "/opt/cloudai-mbridge/mbridge_config.json",
    ]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert "/fsx" in mounts and mounts["/results"]["subPath"] == objects[-1]["metadata"]["name"]


def test_pytorchjob_kind_on_a_generic_cluster(tmp_path: Path) -> None:
    system = system_toml(tmp_path, GENERIC, {f"{PREFIX}KIND": "pytorchjob"})
    res = k8s_dry_run(system, CONF / "test_scenario" / "kimi_k2_dispatcher_ab.toml", tmp_path)
    assert res.returncode == 0, res.output
    dirs = manifest_dirs(res.output_dir)
    assert len(dirs) == 4, "UCCL-EP points are rejected on an InfiniBand system; the all-to-all arm remains"
    assert "[deepep-network]" in res.output
    for k8s_dir in dirs:
        objects = _assert_valid_point(k8s_dir)
        assert [o["kind"] for o in objects] == ["ConfigMap", "PyTorchJob"]
        replicas = objects[1]["spec"]["pytorchReplicaSpecs"]
        assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 31)
        (c, _) = containers(objects[1])
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
        argv, _ = container_view(c, {"RANK": "3", "MASTER_ADDR": "m", "MASTER_PORT": "29500"})
        assert "--node-rank=3" in argv and "--master-addr=m" in argv


def test_refit_scenario_on_eks(tmp_path: Path) -> None:
    from cloudai.core import Registry
    from k8s_cases import register_all

    from cloudai_mbridge.systems.kubernetes.runner import MBridgeKubernetesSystem, json_gen_strategy_class

    register_all()
    refit = Registry().test_definitions_map.get("MBridgeRefit")
    try:
        json_gen_strategy_class(MBridgeKubernetesSystem, refit)  # type: ignore[arg-type]
    except KeyError:
        pytest.skip("MBridgeRefit has no Kubernetes strategy registered yet (workloads/refit/kubernetes.py)")
    res = k8s_dry_run(EKS, CONF / "test_scenario" / "kimi_k2_refit.toml", tmp_path)
    assert res.returncode == 0, res.output
    dirs = manifest_dirs(res.output_dir)
    assert len(dirs) == 7, res.output
    for k8s_dir in dirs:
        objects = _assert_valid_point(k8s_dir)
        assert "mbridge_payload.refit" in containers(objects[-1])[0]["command"]


WIRING = """
from cloudai_mbridge.registration import register
register()
from cloudai.core import Registry
from cloudai.systems.kubernetes import KubernetesRunner, KubernetesSystem
from cloudai.workloads.sleep import SleepTestDefinition
from cloudai_mbridge.systems.kubernetes.runner import json_gen_strategy_class
from cloudai_mbridge.workloads.training import MBridgeTrainingTestDefinition
reg = Registry()
print(reg.systems_map["kubernetes"] is KubernetesSystem, reg.runners_map["kubernetes"] is KubernetesRunner)
ours = reg.systems_map["mbridge_kubernetes"]
print(ours.__name__, reg.runners_map["mbridge_kubernetes"].__name__, "mbridge_kubernetes" in reg.installers_map)
print(reg.get_json_gen_strategy(ours, MBridgeTrainingTestDefinition).__name__)
print(json_gen_strategy_class(ours, SleepTestDefinition).__name__)
print(sorted(t.__name__ for s, t in reg.json_gen_strategies_map if s is KubernetesSystem))
"""


def test_registration_wires_kubernetes(tmp_path: Path) -> None:
    """In a fresh interpreter: what registration.register() alone leaves in CloudAI's Registry. CloudAI's
    "kubernetes" stays CloudAI's (system, runner, the strategies of its own workloads only); ours is a scheduler of
    its own whose runner finds CloudAI's strategies along the class hierarchy, nothing copied."""
    proc = subprocess.run([sys.executable, "-c", WIRING], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "CLOUDAI_MBRIDGE_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:5] == [
        "True True",
        "MBridgeKubernetesSystem MBridgeKubernetesRunner False",
        "MBridgeTrainingKubernetesJsonGenStrategy",
        "SleepKubernetesJsonGenStrategy",
        "['AIDynamoTestDefinition', 'NCCLTestDefinition', 'SleepTestDefinition']",
    ], proc.stdout


# --- what is refused, and how it is said -------------------------------------------------------------------------

SMALL_CASE = (
    'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
    'model = "kimi_k2_proxy"\ngpu = "b300"\ntp = 1\npp = 2\nep = 8\ngbs = 16\nseq_length = 1024\n'
)
ONE_POINT = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 2\n'


@pytest.mark.parametrize(
    ("knob", "value", "expected"),
    [
        ("NODE_SELECTOR", '{"a": ', "not valid JSON"),
        ("TOLERATIONS", '{"key": "x"}', "must be a JSON list"),
        ("TOLERATIONS", '[{"key": "x", "operater": "Exists"}]', "unknown toleration field"),
        ("MOUNTS", '{"fsx": "claim"}', "not a normalized absolute path"),
        ("MOUNTS", '{"/results/x": "claim"}', "overlaps /results"),
        ("CREDENTIALS", '{"HF_TOKEN": "Not_A_Name"}', "not a Secret name"),
        ("CREDENTIALS", '{"HF_TOKEN": "hf-token:..data"}', "not a valid Secret key (must not start with '..')"),
        ("KIND", "mpijob", "unknown kind"),
        ("EFA_DEVICES", "sixteen", "not an integer"),
        ("SHM_SIZE", "lots", "not a Kubernetes quantity"),
        ("NODE_SELECTR", "{}", "unknown cloudai-mbridge Kubernetes setting"),
    ],
)
def test_a_bad_setting_is_a_system_file_error_naming_the_key(knob: str, value: str, expected: str, tmp_path: Path):
    _, scenario = write_case(tmp_path, SMALL_CASE + 'container_image = "img:1"\n', ONE_POINT)
    system = system_toml(tmp_path, EKS, {PREFIX + knob: value})
    res = k8s_dry_run(system, scenario, tmp_path)
    assert res.returncode != 0
    assert PREFIX + knob in res.output and expected in res.output, res.output
    assert "Traceback" not in res.output
    assert not manifest_dirs(res.output_dir)


@pytest.mark.parametrize(
    ("system", "resources", "expected"),
    [
        (GENERIC, '{"nvidia.com/gpu": 0}', "sets nvidia.com/gpu itself, to the plan's GPUs per node"),
        (GENERIC, '{"nvidia.com/gpu": 4}', "change gpus_per_node in the system file"),
        (GENERIC, '{"NVIDIA.com/GPU": 8}', "sets nvidia.com/gpu itself"),
        (EKS, '{"vpc.amazonaws.com/efa": 32}', f"from {PREFIX}EFA_DEVICES"),
        (GENERIC, '{"gpu": 1}', "neither a standard container resource"),
        (GENERIC, '{"kubernetes.io/x": 1}', "a name Kubernetes reserves"),
        (GENERIC, '{"rdma/ib": "0.5"}', "whole devices"),
        (GENERIC, '{"rdma/ib": "lots"}', "not a Kubernetes quantity"),
        (GENERIC, '{"hugepages-huge": "1Gi", "memory": "8Gi"}', "not a huge page size"),
        (GENERIC, '{"hugepages-2Mi": "1Gi"}', "huge pages only with a cpu or memory request"),
    ],
    ids=["gpu-0", "gpu-other-count", "gpu-case", "efa-on-efa-system", "no-domain", "reserved", "fraction",
         "quantity", "hugepage-size", "hugepages-alone"],
)
def test_extra_resources_that_override_the_plan_or_break_the_api_are_refused(system, resources, expected,
                                                                              tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path, SMALL_CASE + 'container_image = "img:1"\n', ONE_POINT)
    system_file = system_toml(tmp_path, system, {PREFIX + "EXTRA_RESOURCES": resources})
    res = k8s_dry_run(system_file, scenario, tmp_path)
    assert res.returncode != 0, res.output
    for part in (str(system_file), PREFIX + "EXTRA_RESOURCES[", expected, "Fix:"):
        assert part in res.output, (part, res.output)
    assert "Traceback" not in res.output
    assert not manifest_dirs(res.output_dir)


def test_genuinely_extra_resources_reach_the_manifest(tmp_path: Path) -> None:
    """An EFA device on a system whose network is not EFA, huge pages with memory: limits = requests, beside the
    plan's GPUs; the manifests still validate."""
    _, scenario = write_case(tmp_path, SMALL_CASE + 'container_image = "img:1"\n', ONE_POINT)
    extra = '{"vpc.amazonaws.com/efa": 4, "hugepages-2Mi": "1Gi", "memory": "512Gi"}'
    system_file = system_toml(tmp_path, GENERIC, {PREFIX + "EXTRA_RESOURCES": extra})
    res = k8s_dry_run(system_file, scenario, tmp_path)
    assert res.returncode == 0, res.output
    (k8s_dir,) = manifest_dirs(res.output_dir)
    objects = _assert_valid_point(k8s_dir)
    (c,) = containers(objects[-1])
    want = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4", "hugepages-2Mi": "1Gi", "memory": "512Gi"}
    assert c["resources"] == {"limits": want, "requests": want}


def test_every_setting_is_documented() -> None:
    text = (CONF / "system" / "eks_b300_efa.toml").read_text() + (CONF / "system" / "k8s_generic.toml").read_text()
    assert [k for k in KNOBS if PREFIX + k not in text] == [], "every setting appears in an example system file"


@pytest.mark.parametrize(
    ("case", "env", "expected"),
    [
        (SMALL_CASE, {}, "needs a container image (cmd_args.container_image=unset)"),
        (SMALL_CASE + 'container_image = " img:1"\n', {}, "container_image ' img:1' is not an image reference"),
        (SMALL_CASE + 'container_image = "img:1"\n', {f"{PREFIX}EFA_DEVICES": None}, f"{PREFIX}EFA_DEVICES"),
        (
            SMALL_CASE + 'container_image = "img:1"\n[extra_env_vars]\nCLOUDAI_MBRIDGE_K8S_KIND = "pytorchjob"\n',
            {},
            "[kubernetes-settings-in-test]",
        ),
        (
            SMALL_CASE + 'container_image = "img:1"\ntask = "sft"\nconvert_checkpoint = true\n'
            'checkpoint_dir = "/lustre/ckpt"\n',
            {},
            "[kubernetes-shared-path]",
        ),
        (SMALL_CASE.replace("ep = 8", "ep = 7") + 'container_image = "img:1"\n', {}, "[experts-per-ep]"),
    ],
    ids=["no-image", "image-whitespace", "efa-without-devices", "setting-in-test", "checkpoint-off-volume", "rule"],
)
def test_points_kubernetes_cannot_run_are_refused_with_the_fix(case, env, expected, tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path, case, ONE_POINT)
    data_env = {k: v for k, v in env.items() if v is not None}
    system = system_toml(tmp_path, EKS, data_env)
    if any(v is None for v in env.values()):
        import toml

        data = toml.load(system)
        for k, v in env.items():
            if v is None:
                del data["global_env_vars"][k]
        system.write_text(toml.dumps(data))
    res = k8s_dry_run(system, scenario, tmp_path)
    assert res.returncode != 0, res.output
    assert expected in res.output and "Fix:" in res.output, res.output
    assert "Traceback" not in res.output
    assert not manifest_dirs(res.output_dir), "nothing is written for a refused point"


def test_dry_run_env_is_really_cluster_free(tmp_path: Path) -> None:
    env = no_cluster_env(tmp_path)
    assert not Path(env["KUBECONFIG"]).exists() and not (Path(env["HOME"]) / ".kube").exists()


def test_our_test_on_cloudais_kubernetes_system_is_refused_with_the_fix(tmp_path: Path) -> None:
    """CloudAI's scheduler "kubernetes" stays CloudAI's (one object per job): a test of ours on such a system file is
    refused before anything is written, naming the scheduler to write instead."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]"
                          "\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: "
                          "u}}]\ncurrent-context: x\n")
    system = tmp_path / "theirs.toml"
    system.write_text(GENERIC.read_text().replace('scheduler = "mbridge_kubernetes"',
                                                  f'scheduler = "kubernetes"\nkube_config_path = "{kubeconfig}"'))
    res = k8s_dry_run(system, CONF / "test_scenario" / "kimi_k2_refit.toml", tmp_path)
    assert res.returncode != 0, res.output
    assert ("[system-kind] the plugin writes MBridgeRefit jobs for scheduler \"mbridge_kubernetes\", \"slurm\", not "
            "for this system's (system=\"k8s-generic-h100-ib\", scheduler=\"kubernetes\")") in res.output, res.output
    assert 'write scheduler = "mbridge_kubernetes" in the system file' in res.output
    assert not res.output_dir.exists() or not any(res.output_dir.rglob("*.json"))
