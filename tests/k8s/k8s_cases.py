"""Building blocks of the Kubernetes tests: isolated environments, in-process strategies, and a fake API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import toml
from helpers import CONF, CliResult, dry_run

K8S_SYSTEMS = CONF / "system"
EKS = K8S_SYSTEMS / "eks_b300_efa.toml"
GENERIC = K8S_SYSTEMS / "k8s_generic.toml"

# A two-node training point small enough to read: Kimi-K2's proxy, 16 ranks on 2 x 8 B300.
SMALL_TEST = {
    "name": "k8s_small",
    "description": "two-node proxy",
    "test_template_name": "MBridgeTraining",
    "cmd_args": {
        "model": "kimi_k2_proxy",
        "gpu": "b300",
        "container_image": "nvcr.io/nvidia/nemo:26.04.01",
        "tp": 1,
        "pp": 2,
        "ep": 8,
        "mbs": 1,
        "gbs": 16,
        "seq_length": 1024,
        "train_iters": 4,
    },
}


def no_cluster_env(tmp: Path) -> dict[str, str]:
    """A HOME without ~/.kube and a KUBECONFIG that does not exist: what a laptop without a cluster looks like."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "KUBECONFIG": str(tmp / "no-such-kubeconfig")}


def system_toml(tmp: Path, base: Path, env: dict[str, str] | None = None, **fields: Any) -> Path:
    data = toml.load(base)
    data["global_env_vars"].update(env or {})
    data.update(fields)
    path = tmp / f"system-{base.stem}.toml"
    path.write_text(toml.dumps(data))
    return path


def k8s_dry_run(system: Path, scenario: Path, tmp: Path, env: dict[str, str] | None = None) -> CliResult:
    return dry_run(system, scenario, tmp, env={**no_cluster_env(tmp), **(env or {})})


def manifest_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.rglob("k8s/objects.json"))


def read_objects(k8s_dir: Path) -> list[dict[str, Any]]:
    return json.loads((k8s_dir / "objects.json").read_text())["items"]


def register_all() -> None:
    from cloudai.core import Registry

    from cloudai_mbridge.registration import register
    from cloudai_mbridge.systems.kubernetes.runner import register_kubernetes

    register()
    register_kubernetes(Registry())  # idempotent: the CLI tests prove registration.py wires it


def make_test_run(test: dict[str, Any], num_nodes: int, output: Path, overrides: dict[str, Any] | None = None):
    from cloudai.core import Registry, TestRun

    data = json.loads(json.dumps(test))
    data["cmd_args"].update(overrides or {})
    tdef = Registry().test_definitions_map[data["test_template_name"]].model_validate(data)
    output.mkdir(parents=True, exist_ok=True)
    return TestRun(name=tdef.name, test=tdef, num_nodes=num_nodes, nodes=[], output_path=output, time_limit="01:00:00")


def k8s_system(path: Path):
    from cloudai.parser import Parser

    register_all()
    return Parser.parse_system(path)


def k8s_strategy(system_path: Path, test: dict[str, Any], num_nodes: int, output: Path, overrides=None):
    """The real CloudAI objects for one point, in-process (CloudAI's own strategy-test style)."""
    from cloudai_mbridge.systems.kubernetes.runner import json_gen_strategy_class

    system = k8s_system(system_path)
    tr = make_test_run(test, num_nodes, output, overrides)
    return json_gen_strategy_class(type(system), type(tr.test))(system, tr)


def load_test(name: str) -> dict[str, Any]:
    return toml.load(CONF / "test" / f"{name}.toml")
