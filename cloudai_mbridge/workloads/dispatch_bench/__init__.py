from .slurm import MBridgeDispatchBenchSlurmCommandGenStrategy
from .test_definition import MBridgeDispatchBenchCmdArgs, MBridgeDispatchBenchTestDefinition

__all__ = [
    "MBridgeDispatchBenchCmdArgs",
    "MBridgeDispatchBenchSlurmCommandGenStrategy",
    "MBridgeDispatchBenchTestDefinition",
]
