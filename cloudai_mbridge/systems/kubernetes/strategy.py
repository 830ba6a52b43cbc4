"""The Kubernetes generation both workloads share: stage payload + config, render our objects, write the manifests.

The twin of systems/slurm/strategy.py. A workload subclass says what runs (``entry``, ``payload_config``, ``base_env``,
``check``, optionally ``pre_steps`` and the processes per pod); this class turns it into a ConfigMap + Service +
Indexed Job (or a PyTorchJob) through launch/kubernetes/, and writes one manifest per object plus objects.json
into ``<output>/k8s/`` in dry-run and run alike. The runner (runner.py) creates what was written.

Cluster settings come from the system's ``global_env_vars`` (CLOUDAI_MBRIDGE_K8S_*, see launch/kubernetes/knobs.py
KNOBS): CloudAI's KubernetesSystem forbids extra fields. They describe the cluster, so a test that sets one in
``extra_env_vars`` is refused; none of them is exported into the pods.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from abc import abstractmethod
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from cloudai.core import JsonGenStrategy

from ...atomic import write_atomic
from ...launch.kubernetes import (
    CONFIG_PATH,
    PREFIX,
    RESULTS_DIR,
    TEST_LABEL,
    K8sConfigError,
    K8sJobSpec,
    K8sSettings,
    PodStep,
    job_name,
    label_value,
    parse_settings,
    render_objects,
    time_limit_seconds,
)
from ...launch.payload import PAYLOAD_SRC, config_text, payload_argv, payload_files, stage_payload, write_config
from ...rules import PointRejectedError, Violation
from ..common import generated_by, open_run_dir, store_test_run, system_env, system_network

MANIFEST_DIR = "k8s"
OBJECTS_FILE = "objects.json"


# A string is written plain only where every YAML reader takes it back as that string: kubectl reads manifests with
# go-yaml v2 (YAML 1.1 typing: y / N / on / off / ~ / 0777 / 0x1F / 1_000 / 1e3 / .inf / 2001-12-14 are booleans,
# null, numbers or timestamps), PyYAML types 1:20 (base 60) and = as well, YAML 1.2 readers type null / true / 1e3.
# Every such scalar starts with a digit, a sign, '.', '~', '<', '=' or is one of the words below (in any case): a
# text of letters, digits, '_', '.', '/' and '-' that starts with a letter, '_' or '/' and is no such word cannot be
# typed as anything but a string. Everything else is double-quoted (PyYAML escapes backslashes, '"' and control
# characters the way go-yaml reads them back).
_PLAIN = re.compile(r"[A-Za-z_/][-A-Za-z0-9_./]*\Z")
_TYPED_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})
# Line breaks a block scalar would not keep: YAML 1.1 readers turn CR and NEL into \n there; BOM is refused in a block.
_NOT_IN_BLOCK = re.compile("[\r\x85\u2028\u2029\ufeff]")


def _scalar_style(text: str) -> str | None:
    if "\n" in text and not _NOT_IN_BLOCK.search(text):
        return "|"  # payload files read as code; PyYAML falls back to double quotes where a block cannot hold the text
    if _PLAIN.match(text) and text.lower() not in _TYPED_WORDS:
        return None
    return '"'


def _strings(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=_scalar_style(data))


class _ManifestDumper(yaml.SafeDumper):
    pass


_ManifestDumper.add_representer(str, _strings)


def to_yaml(obj: dict[str, Any]) -> str:
    """One object as YAML that a YAML 1.1 reader (kubectl's go-yaml v2) and a YAML 1.2 one read back as ``obj``.

    The width is unbounded so that no quoted string is folded over lines (one value, one line)."""
    return yaml.dump(obj, Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True, width=1 << 30)


def k8s_violation(e: K8sConfigError) -> Violation:
    return Violation("kubernetes", {e.key: e.value}, e.problem, e.fix)


class MBridgeKubernetesStrategy(JsonGenStrategy):
    entry: str = ""

    @abstractmethod
    def payload_config(self, output_dir: str) -> dict[str, Any]:
        """The payload's config; ``output_dir`` is where the results volume is mounted in the pods."""

    @abstractmethod
    def base_env(self) -> dict[str, str]: ...

    def check(self) -> list[Violation]:
        """Rule violations of this point (the same as on Slurm); generation refuses a point Megatron rejects."""
        return self.test_run.test.violations(self.test_run, self.system)

    def python(self) -> str:
        return "python3"

    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node  # type: ignore[attr-defined]

    def nproc_per_node(self) -> int:
        return self.gpus_per_node() or 1

    def network(self) -> str:
        return system_network(self.system, "auto")

    def pre_steps(self) -> list[PodStep]:
        return []

    def shared_paths(self) -> dict[str, str]:
        """Fields whose paths must be on a volume every pod mounts (written by one pod, read by the others)."""
        return {}

    def cluster_paths(self) -> dict[str, str]:
        """Fields whose paths the pods read; a warning when no volume holds them (they may be in the image)."""
        return {}

    # -----------------------------------------------------------------------------------------------------------

    def settings(self) -> tuple[K8sSettings, dict[str, str]]:
        return parse_settings(system_env(self.system))

    def violations(self) -> list[Violation]:
        found = list(self.check())
        found += [
            Violation(
                "kubernetes-settings-in-test",
                {f"extra_env_vars.{key}": value},
                "Kubernetes settings describe the cluster, so they live in the system file",
                f"move {key} to global_env_vars of the system",
            )
            for key, value in self.test_run.test.extra_env_vars.items()
            if key.startswith(PREFIX)
        ]
        try:
            settings, _ = self.settings()
        except K8sConfigError as e:
            return [*found, k8s_violation(e)]
        for field_name, path in self.shared_paths().items():
            if not _on_volume(path, settings):
                found.append(
                    Violation(
                        "kubernetes-shared-path",
                        {field_name: path},
                        "one pod writes this path and the others read it, but no volume of the pods holds it",
                        f'add its file system to {PREFIX}MOUNTS, e.g. {{"/{PurePosixPath(path).parts[1]}": "<pvc>"}}',
                    )
                )
        return found

    def image(self) -> str:
        image = getattr(self.test_run.test, "docker_image", None)
        if image is None:
            raise K8sConfigError(
                "cmd_args.container_image",
                None,
                "a Kubernetes pod needs a container image",
                'set container_image = "nvcr.io/nvidia/nemo:<tag>" (or your image) in the test',
            )
        return str(image.url)

    def job_name(self) -> str:
        unique = hashlib.sha1(str(self.test_run.output_path.absolute()).encode()).hexdigest()
        return job_name(self.test_run.name, self.test_run.step, unique)

    def job_spec(self, payload_dir: Path, config_json: str) -> K8sJobSpec:
        settings, system_vars = self.settings()
        test_vars = {k: str(v) for k, v in self.test_run.test.extra_env_vars.items() if not k.startswith(PREFIX)}
        for field_name, path in self.cluster_paths().items():
            if not _on_volume(path, settings):
                logging.warning(
                    "%s: %s = %s is on no volume of the pods (%sMOUNTS); it must then be inside the image",
                    self.test_run.name,
                    field_name,
                    path,
                    PREFIX,
                )
        main = PodStep(self.entry, payload_argv(self.python(), self.entry, Path(CONFIG_PATH)))
        test_label = label_value(self.test_run.name)
        return K8sJobSpec(
            name=self.job_name(),
            namespace=self.system.default_namespace,  # type: ignore[attr-defined]
            image=self.image(),
            num_nodes=self.test_run.nnodes,
            nproc_per_node=self.nproc_per_node(),
            gpus_per_node=self.gpus_per_node(),
            steps=(*self.pre_steps(), main),
            payload_files=payload_files(payload_dir),
            config_text=config_json,
            env={**self.base_env(), **system_vars, **test_vars},
            settings=settings,
            network=self.network(),
            host_network=getattr(self.system, "use_host_network", None) is True,
            time_limit_s=time_limit_seconds(self.test_run.time_limit),
            labels={TEST_LABEL: test_label} if test_label else {},
            annotations={"cloudai-mbridge/generated-by": generated_by()},
            env_origin={
                **{k: f"global_env_vars.{k} of the system file ({self.system.name})" for k in system_vars},
                **{k: f"extra_env_vars.{k} of the test file ({self.test_run.test.name})" for k in test_vars},
            },
        )

    def _render(self, payload_dir: Path, config_json: str) -> list[dict[str, Any]]:
        try:
            return render_objects(self.job_spec(payload_dir, config_json))
        except K8sConfigError as e:
            raise PointRejectedError(self.test_run.name, [k8s_violation(e)]) from None

    def preview(self) -> None:
        """Everything generation checks, in memory (the objects rendered from the payload's sources); nothing is
        written."""
        problems = self.violations()
        if problems:
            raise PointRejectedError(self.test_run.name, problems)
        self._render(PAYLOAD_SRC, config_text(self.payload_config(RESULTS_DIR)))

    def gen_objects(self) -> list[dict[str, Any]]:
        """Check and render in memory first (a refusal writes nothing), then stage the payload + config (the same
        files the ConfigMap carries) into the output folder and write the manifests."""
        problems = self.violations()
        config = self.payload_config(RESULTS_DIR) if not problems else {}
        objects = self._render(PAYLOAD_SRC, config_text(config)) if not problems else []
        out = open_run_dir(self.test_run, problems, self.system)
        stage_payload(out)
        write_config(out, config)
        write_manifests(out / MANIFEST_DIR, objects)
        return objects

    def store_test_run(self) -> None:
        store_test_run(self.test_run, "", "n/a")  # what CloudAI's JsonGenStrategy writes, through the one writer

    def gen_json(self) -> dict[str, Any]:
        """All objects as one ``v1 List`` (what ``kubectl apply -f`` accepts); our runner creates them in order."""
        return {"apiVersion": "v1", "kind": "List", "items": self.gen_objects()}


def _on_volume(path: str, settings: K8sSettings) -> bool:
    p = PurePosixPath(path)
    return any(p == PurePosixPath(m) or PurePosixPath(m) in p.parents for m in settings.mounts)


def write_manifests(folder: Path, objects: list[dict[str, Any]]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    paths = []
    for i, obj in enumerate(objects):
        path = folder / f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        write_atomic(path, to_yaml(obj))
        paths.append(path)
    objects_json = {"apiVersion": "v1", "kind": "List", "items": objects}
    write_atomic(folder / OBJECTS_FILE, json.dumps(objects_json, indent=2) + "\n")
    return paths


def read_objects(output_dir: Path) -> list[dict[str, Any]]:
    return json.loads((output_dir / MANIFEST_DIR / OBJECTS_FILE).read_text(encoding="utf-8"))["items"]
