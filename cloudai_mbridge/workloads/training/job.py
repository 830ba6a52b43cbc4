"""What the Slurm and Kubernetes strategies of MBridgeTraining share (mixed in before the scheduler base)."""

from __future__ import annotations

from typing import cast

from cloudai.core import System, TestRun

from ...launch.training import network_env
from ...plan import TrainingPlan
from .test_definition import MBridgeTrainingTestDefinition


class TrainingJob:
    test_run: TestRun
    system: System
    entry = "train"

    @property
    def tdef(self) -> MBridgeTrainingTestDefinition:
        return cast(MBridgeTrainingTestDefinition, self.test_run.test)

    def plan(self) -> TrainingPlan:
        return self.tdef.plan(self.test_run, self.system)

    def base_env(self) -> dict[str, str]:
        return network_env(self.plan())
