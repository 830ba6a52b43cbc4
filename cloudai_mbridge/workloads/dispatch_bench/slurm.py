"""Slurm job for MBridgeDispatchBench: one rank per GPU, all GPUs of the allocation in one expert-parallel group,
through the same sbatch rendering (every value quoted) and payload staging as MBridgeTraining."""

from __future__ import annotations

from typing import Any, cast

from ...systems.slurm.strategy import MBridgeSlurmStrategy
from .test_definition import MBridgeDispatchBenchTestDefinition


class MBridgeDispatchBenchSlurmCommandGenStrategy(MBridgeSlurmStrategy):
    entry = "dispatch_bench"

    @property
    def tdef(self) -> MBridgeDispatchBenchTestDefinition:
        return cast(MBridgeDispatchBenchTestDefinition, self.test_run.test)

    @property
    def python(self) -> str:  # type: ignore[override]
        return self.tdef.cmd_args.python or super().python

    def base_env(self) -> dict[str, str]:
        # the training job's NCCL logging (launch/training.py network_env), so a report can tell the transport
        return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}

    def payload_config(self) -> dict[str, Any]:
        return self.tdef.payload_config(self.test_run, self.system)
