"""One function per question that several rules ask of a training plan.

Upstream spells some settings more than one way and treats the spellings alike; a rule that tests one spelling by
hand refuses (or accepts) what another rule, asking the same question, decides the other way. Every rule of
``rules/training.py`` and the memory plan (``plan/memory.py``) call these instead.
``tests/rules/test_predicates.py`` enumerates the spellings Bridge accepts for each question and checks that every
rule gives the same verdict on each.

- *Is this a full-iteration CUDA graph?* ``cuda_graph_impl = "full_iteration"`` (megatron-core 0.19), or ``"local"``
  with ``"full_iteration"`` in ``cuda_graph_scope`` (every release; Megatron-Bridge 0.6.0's recipes wrote it so):
  Megatron-Bridge 0.6.2 ``utils/cuda_graph.py`` L121-L131 ``is_full_iteration_cuda_graph`` takes both, and
  megatron-core 0.19.2 ``transformer/cuda_graph_config.py`` L11 migrates the scope to the implementation
  (``'full_iteration': ('cuda_graph_impl', 'full_iteration')``), so the rest of ``TransformerConfig.__post_init__``
  sees one setting. The payload asks the same function (``payload/train/config.py is_full_iteration_graph``).
- *Which per-layer modules does the graph capture?* ``graph_modules``: the scope without ``full_iteration``, with the
  local implementation's moe_router / moe_preprocess pairing (0.19.2 transformer_config.py L2472-L2481).
- *Which dispatcher really runs?* ``flex_backend``: the flex backend Megatron-Core builds (``deepep``, ``hybridep``,
  ``ncclep``), ``None`` for the all-to-all dispatcher.
- *Is the optimizer distributed?* ``optimizer_distributed``: Megatron's distributed optimizer, or Megatron FSDP
  (Bridge 0.6.2 training/config.py L1073-L1077: "Megatron-FSDP always uses a distributed optimizer"); the rules
  (distributed-optimizer-instances, the memory fixes) and the memory plan's optimizer shards ask it.
- *Is the whole MoE layer recomputed?* ``recomputes_moe_layer``: selective recompute with ``moe`` in its modules
  (0.19.2 transformer_config.py L1874, L2697, L2527).
"""

from __future__ import annotations

from ..payload.train.config import is_full_iteration_graph
from .training import TrainingPlan

__all__ = ["flex_backend", "full_iteration_graph", "graph_modules", "optimizer_distributed", "recomputes_moe_layer",
           "uses_cuda_graph"]


def full_iteration_graph(p: TrainingPlan) -> bool:
    """A full-iteration CUDA graph, however the test spells it (module docstring)."""
    return is_full_iteration_graph(p.cuda_graph_impl, p.cuda_graph_scope)


def uses_cuda_graph(p: TrainingPlan) -> bool:
    return p.cuda_graph_impl != "none"


def graph_modules(p: TrainingPlan) -> list[str]:
    """The per-layer modules a CUDA graph captures as Megatron ends up with them: the scope without
    ``full_iteration``; the local implementation adds moe_router and moe_preprocess together (megatron-core 0.16.1
    transformer_config.py L1725-L1735, 0.19.2 L2472-L2481)."""
    scope = [s for s in dict.fromkeys(p.cuda_graph_scope) if s != "full_iteration"]
    if p.cuda_graph_impl == "local" and {"moe_router", "moe_preprocess"} & set(scope):
        scope += [s for s in ("moe_router", "moe_preprocess") if s not in scope]
    return scope


def flex_backend(p: TrainingPlan) -> str | None:
    """The flex dispatcher's backend this point asks Megatron-Core for, None for the all-to-all dispatcher (a backend
    the release or GPU does not take is refused by dispatcher-gpu / dispatcher-bridge-release, not run)."""
    return p.dispatcher if p.uses_flex else None


def optimizer_distributed(p: TrainingPlan) -> bool:
    """The optimizer state is sharded over the data-parallel ranks (module docstring)."""
    return p.use_distributed_optimizer or p.use_megatron_fsdp


def recomputes_moe_layer(p: TrainingPlan) -> bool:
    """Selective recompute wraps the whole MoE layer in one checkpoint (``moe`` in recompute_modules)."""
    return p.recompute == "selective" and "moe" in p.recompute_modules
