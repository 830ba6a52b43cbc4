"""Refit executor ``"replay"`` (config ``executor``): hand Megatron-Core's cached reshard plan straight to the
coalescing copy service, without Megatron-Core's per-refit executor.

Megatron-Core's ``execute_reshard_plan`` walks the plan on every refit: per send op it slices the source parameter,
``.contiguous()``-copies a strided slice (a GPU copy and an allocation each), submits it; per strided receive it
allocates a staging tensor and, after ``run()``, a ``torch.cuda.synchronize()`` and a barrier, copies it back
(measured on 4 x H100: 31-40 ms before ``run()`` and 12-17 ms after it, of an 88 ms refit). The coalescing service
(coalesce.py) packs and unpacks with ``copy_all``, which accepts strided tensors, so it can take the slice views
themselves: the source view ``param.data[op.my_slice]`` is packed straight into the send bucket and the received
bytes are unpacked straight into the destination view. The op list is built once and replayed on every refit.

How the plan is found (the same call the refit itself makes, so the same cached object):

- Megatron-Core >= 0.17 (0.19.2 checked): ``refit._unwrap_model_cores(src, dst)`` then
  ``refit._build_or_get_plan(src_core, tgt_core, num_experts, group=None, src_rank_offset=0, dst_rank_offset=0,
  pool_index=0)``: exactly what ``swap_model_weights`` -> ``reshard_model_weights`` call with their defaults; the
  module-level ``_plan_cache`` holds the plan after the first (collective) refit, so this returns it without a
  collective. Tensors: ``execution.get_refit_tensor_dict`` (parameters and persistent buffers, cached per module).
  A plan with ``transform`` set, or an MXFP8 parameter (``fp8_utils.is_mxfp8tensor``), is not replayed.
- Megatron-Core 0.16.x: ``reshard_model_weights`` keeps the plan on the unwrapped target as
  ``_cached_reshard_plan`` (``build_centralized_reshard_plan``); tensors are ``named_parameters()``; no transforms.

Same order as Megatron-Core's executor (sends in ``plan.send_ops`` order, receives in ``plan.recv_ops`` order,
skipping names the rank does not hold), so the service sees the same signature as in the warm-up refit that went
through ``swap_model_weights``, and its cached plan and buffers are reused (``plan_builds`` stays 1).

What is not done compared with ``execute_reshard_plan``: the ``torch.cuda.synchronize()`` and the barrier after
``run()`` (the coalescing service waits for every transfer; the payload synchronises and barriers around its timed
window) and ``_harmonize_buffer_dtypes`` (its collective ran in the warm-up refit and the payload never changes a
buffer's dtype afterwards). The views stay valid while the parameters keep their storage (the payload's
fill_reference and poison write in place); :meth:`ReplayExecutor.check_storage` rebuilds the op list if a
parameter's ``.data`` was replaced (a replaced buffer object would not be seen: the payload replaces none).
"""

from __future__ import annotations


class FallbackError(Exception):
    """The plan holds something the replay does not handle; the reason is a short word without spaces."""


def _plan_and_tensors(src_model, dst_model):
    """(plan, src tensors by name, dst tensors by name) as Megatron-Core's own refit sees them."""
    from megatron.core.resharding import execution, refit
    from megatron.core.utils import unwrap_model

    if hasattr(refit, "_build_or_get_plan") and hasattr(refit, "_unwrap_model_cores"):
        src_core, tgt_core, num_experts = refit._unwrap_model_cores(src_model, dst_model)
        cache = getattr(refit, "_plan_cache", None)
        before = len(cache) if cache is not None else None
        plan = refit._build_or_get_plan(src_core, tgt_core, num_experts, None, 0, 0, 0)
        if before is not None and len(cache) != before:
            # A new key: the plan was built here (collectively, on every rank at once: all call this together).
            raise FallbackError("plan-not-cached")
        if getattr(plan, "transform", None) is not None:
            raise FallbackError("transform")
        tensors = getattr(execution, "get_refit_tensor_dict", None)
        if tensors is None:
            def tensors(m):
                return dict(m.named_parameters(recurse=True))
    else:
        def lm(m):
            return m[0] if isinstance(m, (list, tuple)) else m

        src_core = unwrap_model(lm(src_model)) if src_model is not None else None
        tgt_core = unwrap_model(lm(dst_model)) if dst_model is not None else None
        plan = getattr(tgt_core, "_cached_reshard_plan", None) if tgt_core is not None else None
        if plan is None:
            raise FallbackError("plan-not-cached")

        def tensors(m):
            return dict(m.named_parameters(recurse=True))
    src = tensors(src_core) if src_core is not None else {}
    dst = tensors(tgt_core) if tgt_core is not None else {}
    return plan, src, dst


def _is_mxfp8(tensor) -> bool:
    try:
        from megatron.core.fp8_utils import is_mxfp8tensor
    except ImportError:
        return False
    return bool(is_mxfp8tensor(tensor))


class ReplayExecutor:
    """Built once (after the warm-up refit), then :meth:`refit` per refit. ``sends`` / ``recvs`` are the service's
    op lists (coalesce._Op), ``held`` the (tensor, data_ptr) of every parameter they view."""

    def __init__(self, src_model, dst_model):
        self.src_model, self.dst_model = src_model, dst_model
        self.prepared = None
        self.held: list[tuple[object, int]] = []
        self.reason: str | None = None

    def build(self) -> None:
        """Collect the op list from Megatron-Core's cached plan; raises FallbackError."""
        import torch

        from .coalesce import Prepared, _Op

        plan, src, dst = _plan_and_tensors(self.src_model, self.dst_model)
        sends, recvs, held = [], [], {}
        for ops, params, out in ((plan.send_ops, src, sends), (plan.recv_ops, dst, recvs)):
            for op in ops:
                param = params.get(op.param_name)
                if param is None:
                    continue
                if _is_mxfp8(param):
                    raise FallbackError("mxfp8")
                data = param.data
                if type(data) is not torch.Tensor:  # a quantized or other tensor subclass: megatron-core's path
                    raise FallbackError(f"tensor-type-{type(data).__name__}")
                held[id(param)] = (param, data.data_ptr())
                out.append(_Op(op.task_id, data[op.my_slice], op.peer_rank, len(out)))
        self.prepared = Prepared(sends, recvs)
        self.held = list(held.values())

    def check_storage(self) -> bool:
        """True while every viewed parameter still has the storage the views were cut from (fill_reference and
        poison write in place; a ``param.data = ...`` elsewhere would not)."""
        return all(p.data.data_ptr() == ptr for p, ptr in self.held)

    def refit(self, service) -> None:
        """One refit: the prepared ops to ``service`` (the coalescing service, possibly wrapped by phases.profiled)
        and its run()."""
        if not self.check_storage():
            self.build()
        service.submit_prepared(self.prepared)
        service.run()
