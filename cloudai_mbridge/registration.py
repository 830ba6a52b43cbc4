"""Wire every workload, strategy and report of the plugin into CloudAI's Registry. Safe to call twice."""

from __future__ import annotations

from ._cloudai import require_cloudai

TRAINING_TEMPLATE = "MBridgeTraining"
REFIT_TEMPLATE = "MBridgeRefit"

_done = False


def register() -> None:
    global _done
    if _done:
        return
    require_cloudai()
    from cloudai.core import Registry
    from cloudai.systems.slurm import SlurmSystem

    from .workloads.refit import MBridgeRefitSlurmCommandGenStrategy, MBridgeRefitTestDefinition
    from .workloads.training import MBridgeTrainingSlurmCommandGenStrategy, MBridgeTrainingTestDefinition

    reg = Registry()
    # update_* replaces instead of raising, so a second import path (the .pth hook and the CLI) is harmless.
    reg.update_test_definition(TRAINING_TEMPLATE, MBridgeTrainingTestDefinition)
    reg.update_command_gen_strategy(SlurmSystem, MBridgeTrainingTestDefinition, MBridgeTrainingSlurmCommandGenStrategy)
    reg.update_test_definition(REFIT_TEMPLATE, MBridgeRefitTestDefinition)
    reg.update_command_gen_strategy(SlurmSystem, MBridgeRefitTestDefinition, MBridgeRefitSlurmCommandGenStrategy)
    _done = True
