"""Kubernetes job for MBridgeTraining: optional HF->Megatron conversion Job, then torchrun in one pod per node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...launch.kubernetes import CONFIG_PATH, K8sConfigError, PodStep
from ...launch.payload import payload_argv
from ...systems.kubernetes.strategy import MBridgeKubernetesStrategy
from .job import TrainingJob


class MBridgeTrainingKubernetesJsonGenStrategy(TrainingJob, MBridgeKubernetesStrategy):
    def gpus_per_node(self) -> int:
        return self.plan().gpus_per_node

    def network(self) -> str:
        return self.plan().network

    def payload_config(self, output_dir: str) -> dict[str, Any]:
        return self.tdef.payload_config(self.test_run, self.system, output_dir)

    def _converts(self) -> bool:
        a = self.tdef.cmd_args
        return a.task == "sft" and a.convert_checkpoint

    def shared_paths(self) -> dict[str, str]:
        a = self.tdef.cmd_args
        return {"cmd_args.checkpoint_dir": a.checkpoint_dir} if self._converts() and a.checkpoint_dir else {}

    def pre_steps(self) -> list[PodStep]:
        if not self._converts():
            return []
        if not self.tdef.cmd_args.checkpoint_dir:
            raise K8sConfigError(
                "cmd_args.checkpoint_dir",
                None,
                "convert_checkpoint = true needs the folder the Megatron checkpoint is written to once and reused",
                "set cmd_args.checkpoint_dir to an absolute path on a volume in CLOUDAI_MBRIDGE_K8S_MOUNTS",
            )
        # payload/convert.py skips by itself when the checkpoint is already complete.
        argv = payload_argv(self.python(), "convert", Path(CONFIG_PATH))
        return [PodStep("convert", argv, torchrun=False, wait=True)]
