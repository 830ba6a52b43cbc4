"""Wire every workload, strategy and report of the plugin into CloudAI's Registry. Safe to call twice.

A guest's rules: only entries of our own are added (our test templates, their strategies, our scenario reports, our
Kubernetes system type); no built-in entry of CloudAI is replaced or copied, so every workload that is not ours runs
exactly as under CloudAI alone (tests/cloudai_guest/ proves it with CloudAI's own suite and its shipped conf/).
"""

from __future__ import annotations

from ._cloudai import require_cloudai

TRAINING_TEMPLATE = "MBridgeTraining"
REFIT_TEMPLATE = "MBridgeRefit"
DISPATCH_BENCH_TEMPLATE = "MBridgeDispatchBench"

_done = False


def register() -> None:
    global _done
    if _done:
        return
    require_cloudai()
    from cloudai.core import Registry
    from cloudai.models.scenario import ReportConfig
    from cloudai.systems.slurm import SlurmSystem
    from cloudai.systems.standalone import StandaloneSystem

    from .reports.ab import ABReportConfig, MBridgeABReport
    from .reports.refit_table import MBridgeRefitTable
    from .systems.kubernetes.runner import MBridgeKubernetesSystem, register_kubernetes
    from .workloads.dispatch_bench import (
        MBridgeDispatchBenchSlurmCommandGenStrategy,
        MBridgeDispatchBenchTestDefinition,
    )
    from .workloads.refit import (
        MBridgeRefitKubernetesJsonGenStrategy,
        MBridgeRefitSlurmCommandGenStrategy,
        MBridgeRefitTestDefinition,
    )
    from .workloads.reporting import MBridgeRefitReport, MBridgeTrainingReport
    from .workloads.training import MBridgeTrainingSlurmCommandGenStrategy, MBridgeTrainingTestDefinition
    from .workloads.training.kubernetes import MBridgeTrainingKubernetesJsonGenStrategy
    from .workloads.training.standalone import MBridgeTrainingStandaloneCommandGenStrategy

    reg = Registry()
    # update_* replaces instead of raising, so a second import path (the .pth hook and the CLI) is harmless.
    reg.update_test_definition(TRAINING_TEMPLATE, MBridgeTrainingTestDefinition)
    reg.update_command_gen_strategy(SlurmSystem, MBridgeTrainingTestDefinition, MBridgeTrainingSlurmCommandGenStrategy)
    # one machine, no scheduler (a borrowed GPU host): torchrun starts the ranks
    reg.update_command_gen_strategy(StandaloneSystem, MBridgeTrainingTestDefinition,
                                    MBridgeTrainingStandaloneCommandGenStrategy)
    reg.update_test_definition(REFIT_TEMPLATE, MBridgeRefitTestDefinition)
    reg.update_command_gen_strategy(SlurmSystem, MBridgeRefitTestDefinition, MBridgeRefitSlurmCommandGenStrategy)
    reg.update_test_definition(DISPATCH_BENCH_TEMPLATE, MBridgeDispatchBenchTestDefinition)
    reg.update_command_gen_strategy(SlurmSystem, MBridgeDispatchBenchTestDefinition,
                                    MBridgeDispatchBenchSlurmCommandGenStrategy)
    reg.update_report(MBridgeTrainingTestDefinition, {MBridgeTrainingReport})
    reg.update_report(MBridgeRefitTestDefinition, {MBridgeRefitReport})
    reg.update_scenario_report("mbridge_ab", MBridgeABReport, ABReportConfig(enable=True))
    reg.update_scenario_report("mbridge_refit", MBridgeRefitTable, ReportConfig(enable=True))
    register_kubernetes(reg)
    reg.update_json_gen_strategy(MBridgeKubernetesSystem, MBridgeTrainingTestDefinition,
                                 MBridgeTrainingKubernetesJsonGenStrategy)
    reg.update_json_gen_strategy(MBridgeKubernetesSystem, MBridgeRefitTestDefinition,
                                 MBridgeRefitKubernetesJsonGenStrategy)
    _done = True
