from .training import (
    CUDA_GRAPH_IMPLS,
    DEEPEP_IMPLS,
    DISPATCHERS,
    FLEX_DISPATCHERS,
    NETWORKS,
    PRECISIONS,
    RECOMPUTE,
    EchoOptions,
    TrainingPlan,
)

__all__ = [
    "CUDA_GRAPH_IMPLS",
    "DEEPEP_IMPLS",
    "DISPATCHERS",
    "FLEX_DISPATCHERS",
    "NETWORKS",
    "PRECISIONS",
    "RECOMPUTE",
    "EchoOptions",
    "TrainingPlan",
]
