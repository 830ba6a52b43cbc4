"""The Kubernetes twin of test_hostile_and_secrets.py: TOML strings land in the manifests as data, and no secret
value reaches a manifest or any generated file.

There is no shell in the pods' command: it is the argv list. What the kubelet still does to a string is $(VAR)
expansion in command and env values; k8s_checks.kubelet_expand is a port of that code, and the process must see
every hostile value verbatim after it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from helpers import CONF, SECRETS, assert_no_secret_leaked, write_case
from k8s_cases import EKS, k8s_dry_run, k8s_strategy, load_test, manifest_dirs, read_objects, system_toml
from k8s_checks import SECRET_NAME, all_errors, container_view, containers

from cloudai_mbridge.launch.kubernetes import PREFIX

HOSTILE = [
    '"; touch {pwn}/semicolon; echo "',
    "$(touch {pwn}/dollar)",
    "`touch {pwn}/backtick`",
    "x\ntouch {pwn}/newline",
    "'; touch {pwn}/quote; '",
    "${{IFS}}touch${{IFS}}{pwn}/ifs",
    "$(NODE_RANK) $$(HOME) $(",
    "key: value\n- item\n---\n{{'a': [1]}}",
]


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_strings_land_as_data(payload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    pwn = tmp_path / "pwn"
    value = payload.format(pwn=pwn)
    on_fsx = "/fsx/" + value.replace("\n", " ")  # path fields are absolute, single-line (validated); shared volume
    image = "nvcr.io/x:" + re.sub(r"\s", "${IFS}", value)  # an image reference has no whitespace (validated)
    system = system_toml(tmp_path, EKS, {"HOSTILE_SYSTEM": value})
    test = load_test("kimi_k2_sft")
    test["name"] = value
    test["extra_env_vars"] = {"HOSTILE_TEST": value}
    out = tmp_path / "out $(touch x)"
    strategy = k8s_strategy(
        system,
        test,
        32,
        out,
        {"container_image": image, "data": on_fsx, "checkpoint_dir": on_fsx, "hf_model_id": on_fsx},
    )
    objects = strategy.gen_objects()

    assert all_errors(objects) == []
    for path in sorted((out / "k8s").glob("*.yaml")):
        index = int(path.name[:2])
        assert yaml.safe_load(path.read_text()) == objects[index], f"{path.name} does not read back as written"
    config = json.loads(objects[0]["data"]["mbridge_config.json"])
    assert (config["data"], config["checkpoint_dir"], config["hf_model_id"]) == (on_fsx, on_fsx, on_fsx)
    workloads = [o for o in objects if o["kind"] == "Job"]
    assert len(workloads) == 2, "conversion and training"
    for obj in workloads:
        for c in containers(obj):
            assert c["image"] == image, "the image must reach the pod as one untouched string"
            argv, env = container_view(c, {"NODE_RANK": "0"})
            assert (env["HOSTILE_SYSTEM"], env["HOSTILE_TEST"]) == (value, value)
            assert argv[0] == "python3" and argv[-2:] == ["--config", "/opt/cloudai-mbridge/mbridge_config.json"]
            assert not any(value in a for a in argv), "no TOML value belongs in the argv"
    assert not pwn.exists() and not (tmp_path / "x").exists()




def test_tokens_reach_pods_only_as_secret_references(tmp_path: Path) -> None:
    credentials = json.dumps({"HF_TOKEN": "hf-token:token", "WANDB_API_KEY": "wandb:api-key"})
    system = system_toml(tmp_path, EKS, {f"{PREFIX}CREDENTIALS": credentials})
    res = k8s_dry_run(system, CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path, env=SECRETS)
    assert res.returncode == 0, res.output
    (k8s_dir,) = manifest_dirs(res.output_dir)
    objects = read_objects(k8s_dir)
    assert all_errors(objects) == []
    for obj in objects:
        for c in containers(obj):
            refs = {
                e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})
            }
            assert refs == {
                "HF_TOKEN": {"name": "hf-token", "key": "token"},
                "WANDB_API_KEY": {"name": "wandb", "key": "api-key"},
            }
            assert not [e["name"] for e in c["env"] if SECRET_NAME.search(e["name"]) and "value" in e]
    assert_no_secret_leaked(tmp_path, res.output, "objects.json")


def test_a_token_written_into_the_system_toml_is_refused(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "b300"\ntp = 1\npp = 2\nep = 8\ngbs = 16\ncontainer_image = "img:1"\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 2\n',
    )
    system = system_toml(tmp_path, EKS, {"HF_TOKEN": "hf_written_in_system_toml"})
    res = k8s_dry_run(system, scenario, tmp_path)
    assert res.returncode != 0
    assert "[no-secrets-in-toml]" in res.output and "global_env_vars.HF_TOKEN" in res.output
    assert "Traceback" not in res.output
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and p != system and b"hf_written" in p.read_bytes()]
    assert not leaked
    assert not manifest_dirs(res.output_dir)
