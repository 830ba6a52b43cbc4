"""Slurm job for MBridgeTraining: optional HF->Megatron checkpoint conversion, then one rank per GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...launch.payload import payload_argv
from ...launch.slurm import SrunStep
from ...systems.slurm.strategy import MBridgeSlurmStrategy
from .job import TrainingJob


class MBridgeTrainingSlurmCommandGenStrategy(TrainingJob, MBridgeSlurmStrategy):
    def ntasks_per_node(self) -> int:
        return self.plan().gpus_per_node

    def mount_sources(self) -> dict[str, str]:
        return self.cluster_paths()

    def payload_config(self) -> dict[str, Any]:
        return self.tdef.payload_config(self.test_run, self.system, str(self.test_run.output_path.absolute()))

    def pre_steps(self) -> list[SrunStep]:
        a = self.tdef.cmd_args
        if not (a.task == "sft" and a.convert_checkpoint):
            return []
        if not a.checkpoint_dir:
            raise ValueError(
                f"{self.test_run.name}: convert_checkpoint = true needs checkpoint_dir (where the Megatron checkpoint "
                "is written once and reused). Fix: set cmd_args.checkpoint_dir to a shared absolute path."
            )
        config = self.test_run.output_path.absolute() / "mbridge_config.json"
        return [
            SrunStep(
                name="convert",
                argv=payload_argv(self.python, "convert", config),
                num_nodes=1,
                ntasks_per_node=1,
                log_name="convert.log",
                skip_if_exists=Path(a.checkpoint_dir) / "latest_checkpointed_iteration.txt",
            )
        ]
