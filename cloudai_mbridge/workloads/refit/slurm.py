"""Slurm job for MBridgeRefit: one task per GPU (or per CPU slot with device = "cpu"), all ranks in one world."""

from __future__ import annotations

from typing import Any, cast

from ...systems.slurm.strategy import MBridgeSlurmStrategy
from .kubernetes import refit_env
from .test_definition import MBridgeRefitTestDefinition, new_run_id


class MBridgeRefitSlurmCommandGenStrategy(MBridgeSlurmStrategy):
    entry = "refit"

    @property
    def tdef(self) -> MBridgeRefitTestDefinition:
        return cast(MBridgeRefitTestDefinition, self.test_run.test)

    @property
    def python(self) -> str:  # type: ignore[override]
        return self.tdef.cmd_args.python or super().python

    def ntasks_per_node(self) -> int:
        return self.tdef.plan(self.test_run, self.system).tasks_per_node

    def base_env(self) -> dict[str, str]:
        return refit_env(self.tdef)

    def payload_config(self) -> dict[str, Any]:
        return {"workload": "refit", **self.tdef.payload_config(), "run_id": new_run_id()}
