from .slurm import MBridgeRefitSlurmCommandGenStrategy
from .test_definition import MBridgeRefitCmdArgs, MBridgeRefitTestDefinition

__all__ = ["MBridgeRefitCmdArgs", "MBridgeRefitSlurmCommandGenStrategy", "MBridgeRefitTestDefinition"]
