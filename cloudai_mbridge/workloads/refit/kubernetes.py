"""Kubernetes job for MBridgeRefit: torchrun in one pod per node, all ranks in one world (GPU or CPU)."""

from __future__ import annotations

from typing import Any, cast

from ...systems.kubernetes.strategy import MBridgeKubernetesStrategy
from .test_definition import MBridgeRefitTestDefinition, new_run_id


class MBridgeRefitKubernetesJsonGenStrategy(MBridgeKubernetesStrategy):
    entry = "refit"

    @property
    def tdef(self) -> MBridgeRefitTestDefinition:
        return cast(MBridgeRefitTestDefinition, self.test_run.test)

    def python(self) -> str:
        return self.tdef.cmd_args.python or super().python()

    def nproc_per_node(self) -> int:
        return self.tdef.plan(self.test_run, self.system).tasks_per_node

    def gpus_per_node(self) -> int:
        return 0 if self.tdef.cmd_args.device == "cpu" else super().gpus_per_node()

    def base_env(self) -> dict[str, str]:
        return refit_env(self.tdef)

    def payload_config(self, output_dir: str) -> dict[str, Any]:
        return {"workload": "refit", **self.tdef.payload_config(), "run_id": new_run_id()}


def refit_env(tdef: MBridgeRefitTestDefinition) -> dict[str, str]:
    """gloo on CPU: one thread per rank keeps several ranks per node from oversubscribing the cores."""
    return {"OMP_NUM_THREADS": "1"} if tdef.cmd_args.device == "cpu" else {"NCCL_DEBUG": "WARN"}
