from .slurm import MBridgeTrainingSlurmCommandGenStrategy
from .test_definition import MBridgeTrainingCmdArgs, MBridgeTrainingTestDefinition

__all__ = ["MBridgeTrainingCmdArgs", "MBridgeTrainingSlurmCommandGenStrategy", "MBridgeTrainingTestDefinition"]
