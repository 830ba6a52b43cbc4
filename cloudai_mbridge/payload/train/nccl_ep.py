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
- What TE checks at bootstrap (the NCCL it runs with, the headers of that NCCL, nvcc, SM 9.0+) the payload checks
  first: payload/nccl_runtime.py.
- torch 2.11 and TE 2.20.2's custom ops. Three of TE's ``transformer_engine_ep`` ops mutate an ``Optional[Tensor] =
  None`` argument (``dispatch``, ``prepare_and_dispatch``: ``recv_scale_inv``; ``combine_bwd``:
  ``grad_expert_out_scale_inv``), None on the bf16 path. torch hands a Python kernel its positional arguments without
  the trailing ones left at their defaults, and torch 2.11's ADInplaceOrView kernel for custom ops indexes them by the
  schema's position (torch/_library/custom_ops.py ``increment_version(args[idx])``): the first bf16 dispatch dies in
  ``IndexError: tuple index out of range`` (seen on 4 x H100, 2026-11-27, every rank). torch 2.13 fills the defaults in
  first (``utils.fill_defaults``). :func:`torch_drops_mutated_defaults` probes the installed torch with a custom op of
  that shape; where it fails, :func:`bypass_mutated_default_ops` has ``torch.ops.transformer_engine_ep.<op>`` call the
  op's own Python body (what the op runs anyway, minus the version-counter bump of buffers the op allocated itself).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
from types import ModuleType
from typing import Any

from .. import nccl_runtime
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


_probe_ids = itertools.count()


def torch_drops_mutated_defaults(torch: ModuleType) -> bool:
    """True when the installed torch's custom-op ADInplaceOrView kernel fails on a mutated argument left at its default
    (see the module docstring): a one-off CPU custom op with schema ``(Tensor x, Tensor(a!)? out=None) -> ()`` is
    called with ``out`` left out."""
    name = f"mbridge_probe{os.getpid()}_{next(_probe_ids)}::mutated_default"

    def body(x: Any, out: Any = None) -> None:
        return None

    op = torch.library.custom_op(name, body, mutates_args=("out",), schema="(Tensor x, Tensor(a!)? out=None) -> ()")
    try:
        op(torch.zeros(1))
    except IndexError:
        return True
    return False


def _mutated_with_default(op_def: Any) -> bool:
    schema = op_def._opoverload._schema
    return any(a.alias_info is not None and a.alias_info.is_write and a.has_default_value() for a in schema.arguments)


def bypass_mutated_default_ops(torch: ModuleType, te_ep: ModuleType) -> list[str]:
    """Point ``torch.ops.<namespace>.<op>`` at the op's Python body for every custom op defined in ``te_ep`` that
    mutates an argument with a default (see the module docstring); returns their names, sorted. Idempotent."""
    from torch._library.custom_ops import CustomOpDef

    done = []
    for value in vars(te_ep).values():
        if not isinstance(value, CustomOpDef) or not _mutated_with_default(value):
            continue
        namespace = getattr(torch.ops, value._namespace)
        setattr(namespace, value._name, value._init_fn)
        done.append(value._name)
    return sorted(done)


def torch_op_shim(torch: ModuleType, te_ep: ModuleType) -> str:
    """The custom-op workaround where this torch needs it; returns what was done for the MBRIDGE_NCCL_EP line."""
    if not torch_drops_mutated_defaults(torch):
        return "none"
    return ",".join(bypass_mutated_default_ops(torch, te_ep)) or "none"


def prepare_nccl_ep(num_topk: int) -> str:
    """Everything the ncclep backend needs before a dispatcher is built, for any payload that builds one (training,
    the dispatch microbenchmark): Transformer Engine's EP module imports, the loaded NCCL and its headers fit NCCL EP
    (payload/nccl_runtime.py), Megatron-Core's bootstrap call gets ``num_topk`` where TE requires it, and the torch
    custom-op workaround where this torch needs it. Raises DispatcherError with what is missing; returns the
    MBRIDGE_NCCL_EP line."""
    import importlib

    try:
        te_ep, error = importlib.import_module(EP_MODULE), None
    except Exception as e:  # a TE without NCCL EP fails with anything from ImportError to an OSError on the library
        te_ep, error = None, f"{type(e).__name__}: {e}"
    check_te_ep(te_ep, error)
    import torch
    from megatron.core.transformer.moe import fused_a2a

    te_version = getattr(importlib.import_module("transformer_engine"), "__version__", "")
    nccl = nccl_runtime.loaded()
    headers = nccl_runtime.nccl_ep_headers(nccl, os.environ)  # os.environ: NCCL EP reads it at bootstrap
    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    problems = nccl_runtime.nccl_ep_problems(nccl, te_version, dict(os.environ), capability)
    if problems:
        raise DispatcherError("dispatcher = 'ncclep' cannot bootstrap NCCL EP here: " + "; ".join(problems))
    line = nccl_ep_line(te_ep, te_version, bootstrap_compat(te_ep, fused_a2a, num_topk))
    return (f"{line} nccl={nccl_runtime.text(nccl.version)} nccl_lib={nccl.path} headers={headers or 'given'} "
            f"torch_op_shim={torch_op_shim(torch, te_ep)}")
