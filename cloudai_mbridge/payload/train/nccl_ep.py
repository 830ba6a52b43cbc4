"""The ``ncclep`` flex backend's runtime side: NCCL EP through Transformer Engine's ``transformer_engine.pytorch.ep``.
Pure stdlib (Transformer Engine and Megatron-Core are imported by the caller and handed in), so it is tested on a CPU.

What the run needs, from the code (megatron-core 0.19.2 = core_v0.19.0 for these files; transformer-engine-cu13
2.18.0 and 2.20.2 wheels):

- ``transformer_engine.pytorch.ep`` must import: megatron/core/transformer/moe/fused_a2a.py L609-L614 sets
  ``HAVE_TE_EP`` from it and token_dispatcher.py L1558-L1562 raises ImportError at the first MoE layer without it.
  TE 2.20.2's cu13 core wheel ships it with ``wheel_lib/libnccl_ep.so``; 2.18.0's ships ``ep.py`` but no NCCL EP
  library.
- The bootstrap call. Megatron-Core 0.19.2's ``ensure_nccl_ep_bootstrapped`` (fused_a2a.py L617-L658, the call at
  L650) calls ``te_ep.ep_bootstrap(ep_group, num_experts=, max_tokens_per_rank=, recv_capacity_per_rank=, hidden_dim=,
  max_num_sms=, zero_copy=)``: TE 2.17 / 2.18's signature. TE 2.19 added a required ``num_topk`` (TE #3229, "NCCL EP
  eager mode and drop-on-overflow"; 2.20.2 ep.py L102-L113, no default), so with TE 2.19+ the first dispatch dies in
  a ``TypeError`` before any NCCL EP code runs. Megatron-LM main passes ``num_topk=self.router_topk`` (#6229, not in
  any core_r0.19 release). :func:`bootstrap_compat` detects exactly that pair and fills ``num_topk`` with the value
  main passes (the flex dispatcher's expert-TP-folded top-k), and says so in the ``MBRIDGE_NCCL_EP`` line; with a
  Megatron-Core that passes ``num_topk`` itself, or a TE that does not take it, nothing is changed.
- What the run cannot check before it starts and TE checks at bootstrap: NCCL >= 2.30.4 at run time (ep.py L49,
  L52-L73) and compute capability >= 9.0 (``NCCL EP requires SM_90+``, libtransformer_engine.so).
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any

from .log import DispatcherError

EP_MODULE = "transformer_engine.pytorch.ep"


def nccl_ep_topk(cfg: dict[str, Any]) -> int:
    """The top-k NCCL EP sees: MoEFlexTokenDispatcher's ``tp_size * moe_router_topk`` with ``tp_size`` the expert-TP
    size (token_dispatcher.py L83-L86, L1792)."""
    return int(cfg["etp"]) * int(cfg["model"]["moe_router_topk"])


def check_te_ep(module: ModuleType | None, error: str | None) -> None:
    """Before building anything: the ncclep backend's Transformer Engine module imports."""
    if module is None:
        raise DispatcherError(
            f"dispatcher = 'ncclep' needs {EP_MODULE} (NCCL EP), which does not import here ({error}); use an image "
            "with a Transformer Engine built with NCCL EP (the transformer-engine-cu13 2.20 wheels ship it, with "
            "libnccl_ep.so), or another dispatcher"
        )


def _takes(fn: Any, name: str) -> inspect.Parameter | None:
    try:
        return inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return None


def needs_topk_shim(te_ep: ModuleType, fused_a2a: ModuleType) -> bool:
    """True when TE's ep_bootstrap requires ``num_topk`` and Megatron-Core's bootstrap helper cannot pass it."""
    te_param = _takes(getattr(te_ep, "ep_bootstrap", None), "num_topk")
    te_requires = te_param is not None and te_param.default is inspect.Parameter.empty
    helper = getattr(fused_a2a, "ensure_nccl_ep_bootstrapped", None)
    mcore_passes = helper is None or _takes(helper, "num_topk") is not None
    return te_requires and not mcore_passes


def bootstrap_compat(te_ep: ModuleType, fused_a2a: ModuleType, num_topk: int) -> str:
    """Make Megatron-Core's bootstrap call fit TE's ep_bootstrap (see the module docstring); returns what was done
    ("native" or "num_topk=<k>") for the MBRIDGE_NCCL_EP line. Idempotent."""
    if not needs_topk_shim(te_ep, fused_a2a):
        return "native"
    original = te_ep.ep_bootstrap
    if getattr(original, "_mbridge_num_topk", None) is not None:
        return f"num_topk={original._mbridge_num_topk}"

    @functools.wraps(original)
    def ep_bootstrap(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("num_topk", num_topk)
        return original(*args, **kwargs)

    ep_bootstrap._mbridge_num_topk = num_topk  # type: ignore[attr-defined]
    te_ep.ep_bootstrap = ep_bootstrap
    return f"num_topk={num_topk}"


def nccl_ep_line(module: ModuleType | None, te_version: str, bootstrap: str) -> str:
    path = getattr(module, "__file__", None) if module is not None else None
    return f"MBRIDGE_NCCL_EP module={path or 'none'} te={te_version or 'unknown'} bootstrap={bootstrap}"
