"""launch/kubernetes/ on literals: the pure renderer, no CloudAI."""

from __future__ import annotations

import re

import pytest
from k8s_checks import DNS1035_LABEL, all_errors, kubelet_expand

from cloudai_mbridge.launch.kubernetes import (
    CONFIGMAP_LIMIT,
    NAME_LIMIT,
    PREFIX,
    K8sConfigError,
    K8sJobSpec,
    K8sSettings,
    PodStep,
    escape,
    job_name,
    label_value,
    parse_settings,
    render_objects,
    time_limit_seconds,
)

ARGV = ("python3", "-m", "mbridge_payload.train", "--config", "/opt/cloudai-mbridge/mbridge_config.json")


def spec(**kw) -> K8sJobSpec:
    base = dict(
        name="t-0-abcdef12",
        namespace="ns",
        image="img:1",
        num_nodes=2,
        nproc_per_node=8,
        gpus_per_node=8,
        steps=(PodStep("train", ARGV),),
        payload_files={"__init__.py": "", "train.py": "print('hi')\n"},
        config_text="{}\n",
        env={"A": "1"},
    )
    return K8sJobSpec(**{**base, **kw})


@pytest.mark.parametrize(
    "text",
    ["", "$", "$$", "$(", "$(A)", "$$(A)", "a$b", "$(A)$(B)x$", "${A}", "$((1+1))", "100%$", "\n$(A)\n", "$$$(A)$"],
)
def test_escape_survives_the_kubelets_expansion(text: str) -> None:
    env = {"A": "EXPANDED", "B": "b"}
    assert kubelet_expand(escape(text), env) == text
    assert kubelet_expand("$(A)", env) == "EXPANDED", "the port of the expansion does expand"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("5:30", 330), ("02:00:00", 7200), ("1-00:00:00", 86400), ("2-3", 183600), ("1-0:30", 88200)],
)
def test_time_limits_in_slurm_formats(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["two hours", "1:2:3:4", "0", "-5"])
def test_bad_time_limit_names_the_field(text: str) -> None:
    with pytest.raises(K8sConfigError, match="time_limit"):
        time_limit_seconds(text)


@pytest.mark.parametrize(
    "name", ["kimi_k2_dispatcher_ab", "123abc", "___", "é" * 80, "A" * 200, "x\n$(touch y)", "-lead-", ""]
)
def test_job_names_are_dns1035_labels_with_room_for_suffixes(name: str) -> None:
    got = job_name(name, 12, "0123456789abcdef")
    assert DNS1035_LABEL.match(got) and len(got) <= NAME_LIMIT, got
    assert got.endswith("-12-01234567")


def test_label_values() -> None:
    assert label_value("kimi_k2 A/B") == "kimi_k2-A-B"
    assert label_value("--x--") == "x"
    assert re.fullmatch(r"[A-Za-z0-9_.-]{0,63}", label_value("y" * 100))


def test_settings_split_control_from_pod_env() -> None:
    settings, pod_env = parse_settings({"FI_PROVIDER": "efa", f"{PREFIX}EFA_DEVICES": "16", f"{PREFIX}KIND": "job"})
    assert pod_env == {"FI_PROVIDER": "efa"}
    assert settings == K8sSettings(kind="job", efa_devices=16)
    assert parse_settings({}) == (K8sSettings(), {})


def test_a_configmap_over_one_mib_is_refused_clearly() -> None:
    big = spec(payload_files={"train.py": "x" * CONFIGMAP_LIMIT})
    with pytest.raises(K8sConfigError, match=r"over the 1 MiB a ConfigMap can hold"):
        render_objects(big)


def test_subpackage_files_are_mounted_at_their_paths() -> None:
    files = {"__init__.py": "", "train/__init__.py": "", "train/__main__.py": "print('hi')\n"}
    configmap, *_, job = render_objects(spec(payload_files=files))
    assert sorted(configmap["data"]) == ["__init__.py", "mbridge_config.json", "train.__init__.py", "train.__main__.py"]
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "payload"]
    assert {i["key"]: i["path"] for i in volume["configMap"]["items"]} == {
        "__init__.py": "mbridge_payload/__init__.py",
        "mbridge_config.json": "mbridge_config.json",
        "train.__init__.py": "mbridge_payload/train/__init__.py",
        "train.__main__.py": "mbridge_payload/train/__main__.py",
    }
    for bad in ({"../x.py": ""}, {"a/b.py": "", "a.b.py": ""}):
        with pytest.raises(K8sConfigError, match="not a distinct relative path"):
            render_objects(spec(payload_files=bad))


def test_minimal_objects_are_valid_for_both_kinds() -> None:
    for kind in ("job", "pytorchjob"):
        for nodes in (1, 3):
            objects = render_objects(spec(num_nodes=nodes, settings=K8sSettings(kind=kind)))
            assert all_errors(objects) == [], (kind, nodes)


def test_cpu_only_pods_ask_for_no_gpu() -> None:
    objects = render_objects(spec(gpus_per_node=0, nproc_per_node=4, network="ethernet"))
    (c,) = objects[-1]["spec"]["template"]["spec"]["containers"]
    assert c["resources"] == {"limits": {}, "requests": {}} and "securityContext" not in c
    assert "--nproc-per-node=4" in c["command"]


def test_host_network_uses_cluster_dns() -> None:
    pod = render_objects(spec(host_network=True))[-1]["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


def test_a_credential_cannot_also_be_a_plain_value() -> None:
    settings, _ = parse_settings({f"{PREFIX}CREDENTIALS": '{"HF_TOKEN": "hf"}'})
    with pytest.raises(K8sConfigError, match="also comes from a Secret"):
        render_objects(spec(env={"HF_TOKEN": "x"}, settings=settings))


def test_the_validators_catch_what_they_claim_to() -> None:
    """Each check listed here must fire, and all of them at once (every error listed, not the first)."""
    objects = render_objects(spec(num_nodes=3, settings=K8sSettings(kind="pytorchjob")))
    job = objects[1]
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    master["replicaz"] = 1
    master["restartPolicy"] = "Nevr"
    master["template"]["spec"]["containers"][0]["name"] = "trainer"
    master["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    job["spec"]["pytorchReplicaSpecs"]["Launcher"] = job["spec"]["pytorchReplicaSpecs"].pop("Worker")
    job["spec"]["runPolicy"]["backoffLimit"] = "zero"
    objects.append({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}})
    errors = "\n".join(all_errors(objects, ["1.31"]))
    for expected in (
        "'replicaz' was unexpected",
        "'imagePullPolcy' was unexpected",
        "'zero' is not of type 'integer'",
        "restartPolicy = 'Nevr'",
        "needs a container named 'pytorch'",
        "replica type = 'Launcher'",
        "schema not found",
    ):
        assert expected in errors, f"{expected!r} not reported:\n{errors}"
