"""What the Slurm and Kubernetes strategies of MBridgeTraining share (mixed in before the scheduler base)."""

from __future__ import annotations

from typing import cast

from cloudai.core import System, TestRun

from ...launch.training import network_env
from ...payload import hf_config
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

    def cluster_paths(self) -> dict[str, str]:
        """Fields whose paths on the cluster the job reads (mounted into the container on Slurm, checked against the
        volumes on Kubernetes): the checkpoint, the data, and local model folders (hf_config_dir, a path as
        hf_model_id)."""
        a = self.tdef.cmd_args
        paths = {"cmd_args.checkpoint_dir": a.checkpoint_dir, "cmd_args.data": None if a.data == "mock" else a.data,
                 "cmd_args.hf_config_dir": a.hf_config_dir,
                 "cmd_args.hf_model_id": a.hf_model_id if hf_config.is_local(a.hf_model_id) else None}
        return {k: v for k, v in paths.items() if v}

    def base_env(self) -> dict[str, str]:
        return network_env(self.plan())
