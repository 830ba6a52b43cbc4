"""Small, local fixes that let megatron-core's refit run correctly here. Each one is applied only when needed.

1. Local-spec experts (upstream-reportable; seen in megatron-core 0.16.1 and 0.19.2).
   The planner matches source and destination parameters by `ParameterMetadata.resolved_name`, which rewrites a
   rank-local expert index into a global one only for TEGroupedMLP names (`...experts.linear_fc1.weight<K>`).
   With the local spec experts are `...mlp.experts.local_experts.<K>.linear_fc1.weight`, K local to the EP rank, so:
   a) EP > 1: the K-th expert of every EP rank gets the same name. Growing the experts per rank (ep4 -> ep2,
      ep2 -> ep1) gives "Destination parameter ... not found in source model" (0.16.1 on CPU, 0.17.1 on GPUs);
      otherwise 0.16.1 silently copies the wrong experts, even for an unchanged ep2 -> ep2 layout (0.17.1 pairs
      equal EP sizes by EP rank, so that case happens to come out right there).
   b) EP == 1: expert parameters carry `allreduce=True`, so they are not treated as expert parameters and are
      planned with the dense TP group even when ETP != TP (0.16.1: "Cannot build TP descriptor ... src_world*
      src_local=2*64 != 1*32" for tp2/etp1 -> tp1/etp2).
   The fix wraps `megatron.core.resharding.planner.extract_param_metadata` (the name the planner calls) and, for
   parameters under `.local_experts.<K>.`, sets resolved_name to the global expert index
   (ep_rank * experts_per_rank + K) and records the expert groups (ep, expt_tp, expt_dp) in the metadata, which is
   what the planner already does for TEGroupedMLP names. Nothing else is touched. It is installed only when
   megatron-core's own `_detect_expert_index_from_param_name` does not recognise local expert names (so it switches
   itself off once upstream handles them), and only for layouts with EP > 1 or ETP != TP on either side.

2. CPU only: `GlooCopyService.__init__` creates a CUDA stream (0.16); with a CPU-only torch that raises. We build the
   cached "gloo" service while `torch.cuda.Stream` returns None, which its `run()` already treats as "no stream".
   megatron-core >= 0.17 also pins memory and calls `torch.cuda.synchronize()` in the execution path, which no
   shim this small can cover: CPU runs need megatron-core 0.16.x and we say so instead of patching torch.
"""

from __future__ import annotations

import contextlib
import inspect
import re

import torch

_LOCAL_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")
_PROBE_NAME = "decoder.layers.0.mlp.experts.local_experts.1.linear_fc1.weight"
_MARK = "_cloudai_mbridge_local_expert_fix"


def megatron_version() -> tuple[int, int, int]:
    from megatron.core import package_info

    return int(package_info.MAJOR), int(package_info.MINOR), int(package_info.PATCH)


def accepts_absent_side() -> bool:
    """megatron-core >= 0.17 takes None for the side a rank does not hold (non-collocated)."""
    return megatron_version() >= (0, 17, 0)


def upstream_handles_local_experts() -> bool:
    from megatron.core.resharding import utils

    return utils._detect_expert_index_from_param_name(_PROBE_NAME) is not None


def fix_local_expert_metadata(meta, pg_collection, num_experts: int | None, rank_offset: int = 0) -> None:
    """Give a local-spec expert parameter its global expert name and the expert groups (see module docstring)."""
    import torch.distributed as dist

    match = _LOCAL_EXPERT.search(meta.name)
    if match is None or not num_experts:
        return
    ep_size = dist.get_world_size(pg_collection.ep)
    global_index = dist.get_rank(pg_collection.ep) * (num_experts // ep_size) + int(match.group(1))
    resolved = meta.resolved_name or meta.name
    meta.resolved_name = _LOCAL_EXPERT.sub(f".local_experts.{global_index}.", resolved, count=1)
    meta.global_expert_index = global_index
    meta.is_ep = True

    def ranks(group) -> list[int]:
        return [r + rank_offset for r in dist.get_process_group_ranks(group)]

    meta.expert_parallel_group_ranks = ranks(pg_collection.ep)
    if meta.is_tp:
        meta.tensor_parallel_group_ranks = ranks(pg_collection.expt_tp)
    meta.data_parallel_group_ranks = ranks(pg_collection.expt_dp)


def install_local_expert_fix() -> str:
    """Wrap the planner's metadata extraction; returns what was done ("installed", "already", "not-needed").

    Raises RuntimeError when this megatron-core's function has a signature the wrapper does not understand.
    """
    from megatron.core.resharding import planner

    original = planner.extract_param_metadata
    if getattr(original, _MARK, False):
        return "already"
    if upstream_handles_local_experts():
        return "not-needed"
    signature = inspect.signature(original)
    missing = {"pg_collection", "num_experts"} - set(signature.parameters)
    if missing:
        raise RuntimeError(
            f"megatron-core {'.'.join(map(str, megatron_version()))}: planner.extract_param_metadata has no "
            f"{sorted(missing)} parameter(s); the local-expert adapter cannot be applied"
        )

    def extract_param_metadata(*args, **kwargs):
        meta = original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        fix_local_expert_metadata(
            meta,
            bound.arguments["pg_collection"],
            bound.arguments["num_experts"],
            bound.arguments.get("rank_offset", 0) or 0,
        )
        return meta

    setattr(extract_param_metadata, _MARK, True)
    extract_param_metadata.__wrapped__ = original
    planner.extract_param_metadata = extract_param_metadata
    return "installed"


@contextlib.contextmanager
def _cuda_stream_returns_none():
    saved = torch.cuda.Stream
    torch.cuda.Stream = lambda *args, **kwargs: None
    try:
        yield
    finally:
        torch.cuda.Stream = saved


def prepare_cpu_transport(transport: str) -> None:
    """Create the cached CopyService for `transport` on CPU so swap_model_weights(..., transport) finds it."""
    from megatron.core.resharding import refit

    if megatron_version() >= (0, 17, 0):
        raise RuntimeError(
            f"device=cpu with megatron-core {'.'.join(map(str, megatron_version()))}: its GlooCopyService pins "
            "memory and synchronises CUDA, which a CPU-only torch cannot do; use megatron-core 0.16.x for CPU "
            "runs or set device to 'cuda'"
        )
    with _cuda_stream_returns_none():
        refit.get_or_create_service(transport)
