"""GPU types: memory, node shape, NVLink domain and which MoE dispatcher backends Megatron accepts on them.

Dispatcher support follows Megatron-Bridge's flex dispatcher backend check (training/flex_dispatcher_backend.py):
DeepEP on compute capability 8.x/9.x or device names starting with B200/B300; HybridEP on 8.x/9.x/10.x. GB200/GB300
with DeepEP is rejected there (the Grace-Blackwell parts report a name Bridge does not allow for DeepEP) and we
reject it too instead of letting the run fall back to all-to-all.

``bf16_dense_tflops`` is the dense (no 2:4 sparsity) BF16 Tensor Core peak per GPU from NVIDIA's datasheets, the
denominator of the reports' MFU: H100 / H200 SXM 1,979 TFLOP/s with sparsity; HGX B200 and HGX B300 36 PFLOP/s with
sparsity per 8 GPUs; GB200 / GB300 NVL72 360 PFLOP/s with sparsity per 72 GPUs; each halved for dense. An fp8 run is
still measured against the BF16 peak (the reports say so).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_gib: float  # usable HBM per GPU as the driver reports it
    gpus_per_node: int
    nvlink_domain: int  # GPUs reachable over NVLink without the network
    compute_capability: tuple[int, int]
    deepep: bool
    hybridep: bool
    fp8_recipes: frozenset[str]
    bf16_dense_tflops: float = 0.0

    @property
    def is_blackwell(self) -> bool:
        return self.compute_capability[0] >= 10


# The system file names its GPU model with this key in [global_env_vars]; a plugin setting, never exported to jobs.
GPU_ENV = "CLOUDAI_MBRIDGE_GPU"

_HOPPER_FP8 = frozenset({"delayed", "tensorwise", "blockwise"})
_BLACKWELL_FP8 = frozenset({"delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4"})

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec(
            "h100", 79.6, 8, 8, (9, 0), deepep=True, hybridep=True, fp8_recipes=_HOPPER_FP8,
            bf16_dense_tflops=989.5,
        ),
        GPUSpec(
            "h200", 139.8, 8, 8, (9, 0), deepep=True, hybridep=True, fp8_recipes=_HOPPER_FP8,
            bf16_dense_tflops=989.5,
        ),
        GPUSpec(
            "b200", 178.4, 8, 8, (10, 0), deepep=True, hybridep=True, fp8_recipes=_BLACKWELL_FP8,
            bf16_dense_tflops=2250.0,
        ),
        GPUSpec(
            "b300", 268.0, 8, 8, (10, 3), deepep=True, hybridep=True, fp8_recipes=_BLACKWELL_FP8,
            bf16_dense_tflops=2250.0,
        ),
        GPUSpec(
            "gb200", 184.0, 4, 72, (10, 0), deepep=False, hybridep=True, fp8_recipes=_BLACKWELL_FP8,
            bf16_dense_tflops=2500.0,
        ),
        GPUSpec(
            "gb300", 268.0, 4, 72, (10, 3), deepep=False, hybridep=True, fp8_recipes=_BLACKWELL_FP8,
            bf16_dense_tflops=2500.0,
        ),
        # Vera Rubin NVL72 (searched 2026-11 in the pages/docs corpora; no NVIDIA datasheet page with the per-GPU
        # figure was found there, so the sources are secondary and the numbers preliminary):
        # - memory: 288 GB HBM4 per Rubin GPU, 20.7 TB per 72-GPU rack (genztech.blog/p/nvidia-vera-rubin-nvl72-
        #   production, regantih.github.io reports-lab NVL72 notes; both quote NVIDIA's CES / Computex 2026 figures).
        #   Usable memory is MODELLED as B300's (a 288 GB part reports 268 GiB): no VR200 was measured.
        # - NVLink domain: 72 GPUs, one NVLink 6 domain per rack, 18 compute trays of 4 GPUs (learnaivisually.com
        #   vera-rubin-nvl72-nvlink-rack-domain; NVIDIA's Vera-Rubin NVL72 tuning guide, docs.nvidia.com/dccpu/
        #   vera-mn-perf-tuning-guide, is written for the 72-GPU rack); Bridge 0.6.2's VR200 recipes use the same
        #   (perf_recipes/deepseek/vr200/deepseek_v3.py NVLINK_DOMAIN_SIZE 72, HybridEP).
        # - compute capability 10.7: NCCL v2.32.3-1 release notes ("Rubin platform support including support for
        #   sm107", github.com/NVIDIA/nccl/releases/tag/v2.32.3-1) and TensorRT-LLM v1.3.0's ("NVIDIA Rubin
        #   (SM107)"). Major 10: Bridge 0.6.2's HybridEP / NCCL EP allowlists (training/flex_dispatcher_backend.py
        #   L72, L81) compare the major only.
        # No dense BF16 peak published: 0 (the reports give no MFU).
        GPUSpec(
            "vr200", 268.0, 4, 72, (10, 7), deepep=False, hybridep=True, fp8_recipes=_BLACKWELL_FP8,
        ),
    )
}


def gpu_for_device_name(device_name: str) -> str | None:
    """The catalog key a CUDA / nvidia-smi device name names (``NVIDIA H200`` -> h200; the longest key found in it
    wins, so ``NVIDIA GB200`` is gb200, not b200), None for a GPU the catalog does not hold."""
    name = device_name.lower()
    return next((k for k in sorted(GPUS, key=len, reverse=True) if k in name), None)


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown GPU type {name!r}; known: {', '.join(GPUS)}") from None
