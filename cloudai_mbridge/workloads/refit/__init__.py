from .kubernetes import MBridgeRefitKubernetesJsonGenStrategy
from .slurm import MBridgeRefitSlurmCommandGenStrategy
from .test_definition import MBridgeRefitCmdArgs, MBridgeRefitTestDefinition

__all__ = [
    "MBridgeRefitCmdArgs",
    "MBridgeRefitKubernetesJsonGenStrategy",
    "MBridgeRefitSlurmCommandGenStrategy",
    "MBridgeRefitTestDefinition",
]
