from .gpus import GPUS, GPUSpec, get_gpu
from .models import MODELS, ModelSpec, get_model

__all__ = ["GPUS", "MODELS", "GPUSpec", "ModelSpec", "get_gpu", "get_model"]
