"""Rules for the training workload: what Megatron-Core / Megatron-Bridge would reject at step 0, and OOM.

File references: Megatron-Core core_v0.16.1 (``megatron/core/...``, the installed megatron-core 0.16.1),
Megatron-LM main (``main:megatron/...``, where a check is newer than 0.16.1), Megatron-Bridge v0.4.0
(``bridge:src/megatron/bridge/...``), DeepEP hybrid-ep branch (``deep_ep/hybrid_ep_buffer.py``), MoE Echo
(``Victarry/Megatron-MoE-Echo``) and CloudAI's built-in MegatronBridge workload (``cloudai:megatron_bridge.py``).
The ``ncclep`` rules cite megatron-core 0.19.2 (``mcore-0.19:megatron/core/...``, the PyPI wheel, identical to the
core_v0.19.0 tag in these files), the megatron-bridge 0.6.2 wheel (``bridge-0.6.2:...``) and the
transformer-engine-cu13 2.20.2 wheel (``te:transformer_engine/pytorch/ep.py``, ``nccl_ep:`` for the NCCL EP headers
it ships under ``transformer_engine/wheel_lib/nccl_ep/include/``, ``libnccl_ep.so`` for that library's own
assertion strings).

Rules marked *differential* are checked against the real megatron-core on the CPU in
``tests/rules/test_differential.py``: on generated configs, the verdict of the rule set restricted to them must
match whether the real ``MLATransformerConfig(...)`` raises (and the layout DSL must parse and validate alike).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from ..catalog import GPUSpec
from ..catalog.bridge import BRIDGE_RELEASES, DEFAULT_BRIDGE, device_name
from ..plan import TrainingPlan
from ..plan.layout import UNEVEN_PP_TOO_SMALL
from ..plan.memory import estimate_memory
from ..plan.predicates import (
    flex_backend,
    full_iteration_graph,
    graph_modules,
    optimizer_distributed,
    recomputes_moe_layer,
    uses_cuda_graph,
)
from .base import RuleSet, Violation

TRAINING_RULES: RuleSet[TrainingPlan] = RuleSet("training")
rule = TRAINING_RULES.rule

# Rules whose verdict comes from TransformerConfig.__post_init__ / the layout parser (see the module docstring).
DIFFERENTIAL_RULES = frozenset({
    "heads-per-tp", "pipeline-layout", "a2a-overlap", "a2a-overlap-cuda-graph", "delay-wgrad", "cpu-offloading",
    "cuda-graph", "recompute-modules", "shared-expert-overlap", "uneven-pipeline",
})


def _v(fields: dict[str, object], message: str, fix: str) -> Violation:
    return Violation("", fields, message, fix)


def nearest(value: int, valid: list[int]) -> str:
    """The valid values closest to ``value`` below and above it, for a divisibility rule's fix ("4 or 8")."""
    below = [v for v in valid if v < value]
    above = [v for v in valid if v > value]
    picks = [*below[-1:], *above[:1]]
    return " or ".join(map(str, picks)) if picks else "none"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n > 0 else []


# --------------------------------------------------------------------------------------------------------------
# Parallel layout
# --------------------------------------------------------------------------------------------------------------


@rule("node-shape")
def _node_shape(p: TrainingPlan) -> Iterator[Violation]:
    """A node of this GPU type holds ``gpu.gpus_per_node`` GPUs (B300 HGX: 8, GB200 NVL72 tray: 4); the world size
    Megatron sees is num_nodes x gpus_per_node (parallel_state.py L736), so the two must describe real nodes."""
    if p.num_nodes < 1 or not 1 <= p.gpus_per_node <= p.gpu.gpus_per_node:
        yield _v({"num_nodes": p.num_nodes, "gpus_per_node": p.gpus_per_node, "gpu": p.gpu.name},
                 f"a {p.gpu.name} node has 1..{p.gpu.gpus_per_node} GPUs and a job at least one node",
                 f"set gpus_per_node to at most {p.gpu.gpus_per_node} and num_nodes >= 1")


@rule("world-size-model-parallel")
def _world_vs_model_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py L740-L741 initialize_model_parallel: world_size % (tp*pp*cp) must be 0
    (Bridge: training/config.py L983 get_data_parallel_size; CloudAI constraints 1 and 3)."""
    if p.world_size % p.model_parallel:
        tps = [t for t in _divisors(p.world_size) if p.world_size % (t * p.pp * p.cp) == 0]
        yield _v({"num_nodes": p.num_nodes, "gpus_per_node": p.gpus_per_node, "tp": p.tp, "pp": p.pp, "cp": p.cp},
                 f"world size {p.world_size} is not divisible by tp*pp*cp = {p.model_parallel}",
                 "pick tp, pp, cp whose product divides num_nodes * gpus_per_node (with this pp and cp, the "
                 f"nearest tp: {nearest(p.tp, tps)})")


@rule("world-size-expert-parallel")
def _world_vs_expert_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py L788-L794: world_size % (etp*ep*pp) must be 0 (CloudAI constraint 7)."""
    denom = p.etp * p.ep * p.pp
    if p.world_size % denom:
        eps = [e for e in _divisors(p.world_size) if p.world_size % (p.etp * e * p.pp) == 0
               and p.model.num_experts % e == 0]
        yield _v({"world_size": p.world_size, "etp": p.etp, "ep": p.ep, "pp": p.pp},
                 f"world size {p.world_size} is not divisible by etp*ep*pp = {denom}",
                 "pick ep (and etp) so that etp*ep*pp divides the world size (with this etp and pp, the nearest ep "
                 f"that also divides the {p.model.num_experts} experts: {nearest(p.ep, eps)})")


@rule("global-batch")
def _global_batch(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/num_microbatches_calculator.py L340: gbs % (mbs*dp) must be 0 (CloudAI constraint 4)."""
    if p.dp and p.gbs % (p.mbs * p.dp):
        step = p.mbs * p.dp
        near = nearest(p.gbs, [step * k for k in (p.gbs // step, p.gbs // step + 1) if k > 0])
        yield _v({"gbs": p.gbs, "mbs": p.mbs, "dp": p.dp},
                 f"global batch {p.gbs} is not divisible by mbs*dp = {p.mbs * p.dp}",
                 f"use a gbs that is a multiple of {p.mbs * p.dp} (nearest: {near})")


@rule("experts-per-ep")
def _experts_vs_ep(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/moe/moe_layer.py L101 (and token_dispatcher.py L227): num_moe_experts % ep == 0."""
    if p.model.num_experts % p.ep:
        yield _v({"model": p.model.name, "num_experts": p.model.num_experts, "ep": p.ep},
                 f"{p.model.num_experts} experts cannot be split evenly over ep={p.ep}",
                 "use an ep that divides the number of experts (nearest: "
                 f"{nearest(p.ep, _divisors(p.model.num_experts))})")


@rule("heads-per-tp")
def _heads_vs_tp(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L924-L928: num_attention_heads % tp == 0
    (L939-L946, num_query_groups, is the same check for MLA, where groups = heads)."""
    if p.model.num_attention_heads % p.tp:
        yield _v({"model": p.model.name, "num_attention_heads": p.model.num_attention_heads, "tp": p.tp},
                 f"{p.model.num_attention_heads} attention heads cannot be split over tp={p.tp}",
                 "use a tp that divides the number of attention heads (nearest: "
                 f"{nearest(p.tp, _divisors(p.model.num_attention_heads))})")


@rule("sequence-parallel")
def _sequence_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/tensor_parallel/mappings.py L66-L70 _split_along_first_dim: with sequence parallelism each
    CP rank's sequence (seq_length / cp) is split over the TP ranks and must divide evenly."""
    if p.sequence_parallel and p.tp > 1 and p.seq_length % p.cp == 0 and (p.seq_length // p.cp) % p.tp:
        yield _v({"seq_length": p.seq_length, "cp": p.cp, "tp": p.tp},
                 f"seq_length/cp = {p.seq_length // p.cp} is not divisible by tp={p.tp} with sequence parallelism",
                 f"use a seq_length that is a multiple of cp*tp = {p.cp * p.tp}")


@rule("moe-tp-sequence-parallel")
def _moe_tp_sequence_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/moe/moe_layer.py L379-L383 (core_v0.16.1) MoELayer.forward raises ValueError in
    training when the attention TP group is larger than one and sequence parallelism is off (the payload turns
    sequence_parallel on exactly when tp > 1 and the test asks for it)."""
    if p.tp > 1 and not p.sequence_parallel:
        yield _v({"tp": p.tp, "sequence_parallel": False},
                 "MoE layers with tensor parallelism need sequence parallelism (Megatron raises at the first step)",
                 "set sequence_parallel = true, or tp = 1")


@rule("context-parallel")
def _context_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """bridge:training/config.py L1176-L1179 (and megatron/core/utils.py get_batch_on_this_cp_rank): each CP rank
    takes two chunks of the sequence, so seq_length % (2*cp) == 0."""
    if p.cp > 1 and p.seq_length % (2 * p.cp):
        yield _v({"seq_length": p.seq_length, "cp": p.cp},
                 f"seq_length {p.seq_length} is not divisible by 2*cp = {2 * p.cp}",
                 "use a seq_length that is a multiple of 2*cp")


@rule("distributed-optimizer-instances")
def _distributed_optimizer_instances(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py L833-L837 and L1263-L1265: (dp*cp) and expert-dp must both be divisible by
    num_distributed_optimizer_instances; a partial distributed optimizer needs a distributed optimizer (or Megatron
    FSDP) to begin with (CloudAI constraint 9 demands FSDP; Megatron-Core accepts the distributed optimizer too)."""
    ndo = p.num_distributed_optimizer_instances
    if ndo == 1:
        return
    if not optimizer_distributed(p):
        yield _v({"num_distributed_optimizer_instances": ndo, "use_distributed_optimizer": False,
                  "use_megatron_fsdp": False},
                 "several distributed-optimizer instances need a distributed optimizer to partition",
                 "set use_distributed_optimizer (or use_megatron_fsdp), or num_distributed_optimizer_instances = 1")
    if p.dp and (p.dp * p.cp) % ndo:
        yield _v({"dp": p.dp, "cp": p.cp, "num_distributed_optimizer_instances": ndo},
                 f"dp*cp = {p.dp * p.cp} is not divisible by {ndo} distributed-optimizer instances",
                 "use a num_distributed_optimizer_instances that divides dp*cp")
    if p.expert_dp and p.expert_dp % ndo:
        yield _v({"expert_dp": p.expert_dp, "num_distributed_optimizer_instances": ndo},
                 f"expert data-parallel size {p.expert_dp} is not divisible by {ndo} distributed-optimizer instances",
                 "use a num_distributed_optimizer_instances that divides world/(etp*ep*pp)")


# --------------------------------------------------------------------------------------------------------------
# Pipeline
# --------------------------------------------------------------------------------------------------------------


@rule("virtual-pipeline")
def _virtual_pipeline(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py L745-L749: an interleaved (virtual) pipeline needs pp > 1 -- also when the vp
    comes from an explicit layout with several stages at pp = 1 (Megatron derives vp = stages / pp; CloudAI's
    upstream constraint for VP with PP = 1, NVIDIA/cloudai#1025)."""
    if p.vp is not None and p.vp > 1 and p.pp == 1:
        yield _v({"pp": p.pp, "vp": p.vp}, "virtual pipeline stages need pipeline parallelism",
                 "set vp to 1 (or unset it), or use pp > 1")
    elif p.pp == 1 and p.pipeline_layout is not None:
        layout = p.pipeline.layout
        if layout is not None and layout.vp > 1:
            yield _v({"pp": 1, "pipeline_layout": p.pipeline_layout},
                     f"pipeline_layout has {layout.vp} stages at pp = 1: Megatron derives vp = {layout.vp}, and an "
                     "interleaved schedule needs pipeline parallelism",
                     "give one stage (no '|') at pp = 1, or raise pp")


@rule("explicit-vp")
def _explicit_vp(p: TrainingPlan) -> Iterator[Violation]:
    """An explicit ``vp = 1`` beside an explicit layout of more than pp stages: the payload hands Megatron no vp
    for 1 (``virtual_pipeline``), and Megatron-Core then derives vp = stages / pp from the layout
    (transformer_config.py L1340-L1352), silently running another schedule than the test says. A vp above 1 that
    disagrees is Megatron's own error (pipeline-layout)."""
    if p.vp == 1 and p.pp > 1 and p.pipeline_layout is not None:
        layout = p.pipeline.layout
        if layout is not None and layout.vp > 1:
            yield _v({"vp": 1, "pp": p.pp, "pipeline_layout": p.pipeline_layout},
                     f"vp = 1 but pipeline_layout has {layout.vp * p.pp} stages, {layout.vp} per pp rank: Megatron "
                     f"would run vp = {layout.vp}, not the vp = 1 the test sets",
                     f"set vp = {layout.vp} (what the layout implies), drop vp, or give a layout of pp = {p.pp} "
                     "stages")


@rule("pipeline-layout-table")
def _pipeline_layout_table(p: TrainingPlan) -> Iterator[Violation]:
    """bridge:recipes/kimi/kimi_k2.py L28-L47 _get_kimi_k2_pipeline_layout (v0.4.0) raises ValueError for a
    (PP, VP) pair outside its table; bridge:recipes/deepseek/deepseek_v3.py L29-L50 leaves such a pair without a
    layout and Megatron's even split of 61 layers then fails (transformer_block.py L155-L158); CloudAI constraint
    18. Proxies are in no Bridge recipe: the payload derives their layout (pipeline-layout checks it). Uneven first /
    last stages replace the table (uneven-pipeline checks them)."""
    if p.pipeline_layout is None and not p.model.is_proxy and not uneven_stages_set(p):
        pair = (p.pp, p.vp or 1)
        if pair not in p.model.recipe_pp_vp:
            yield _v({"model": p.model.name, "pp": p.pp, "vp": p.vp},
                     f"the {p.model.family} recipe has no pipeline layout for (pp, vp) = {pair}",
                     f"use one of {sorted(p.model.recipe_pp_vp)} or give an explicit pipeline_layout")


@rule("pipeline-layout")
def _pipeline_layout(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* The layout Megatron builds, checked as Megatron-Core checks it:
    megatron/core/transformer/pipeline_parallel_layer_layout.py L283-L320 (DSL parse: E t m L | (..)*n, x*n),
    L39-L45 (stage count % pp, vp = stages / pp), transformer_config.py L1340-L1352 (vp must equal the layout's),
    L85-L150 validate_layer_layout (one E first, one L last, decoders == num_layers, MTP count == mtp_num_layers
    with None meaning 0, MTP after every decoder and in one last virtual stage); the recipe table's MTP tail follows
    ``getattr(cfg, "mtp_num_layers", 1) or 0`` and proxies get the same rule derived for their layer count
    (plan/layout.py)."""
    if p.pipeline_layout is None and not p.model.is_proxy and (p.pp, p.vp or 1) not in p.model.recipe_pp_vp:
        return  # pipeline-layout-table says it
    if uneven_stages_set(p):
        return  # uneven-pipeline says it
    resolved = p.pipeline
    if resolved.problems:
        yield _v({"model": p.model.name, "pp": p.pp, "vp": p.vp, "pipeline_layout": p.pipeline_layout,
                  "mtp_num_layers": p.effective_mtp_layers},
                 f"the {resolved.source} pipeline layout is invalid: {'; '.join(resolved.problems)}",
                 "fix the layout string (e.g. 'Et*4|(t*4|)*14,tmL' style, one stage per pp*vp) or use a (pp, vp) "
                 "pair from the recipe table")


def uneven_stages_set(p: TrainingPlan) -> bool:
    return p.num_layers_in_first_pipeline_stage is not None or p.num_layers_in_last_pipeline_stage is not None


@rule("uneven-pipeline")
def _uneven_pipeline(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential* (tests/rules/test_uneven_pipeline.py). Uneven first / last pipeline stages
    (num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage, Megatron-LM's
    --decoder-first/last-pipeline-num-layers): megatron-core 0.19.2 transformer_config.py L1935-L1953 (0.17.1
    L1486-L1504) refuses them beside a pipeline layout; L1988-L2062 (0.17.1 L1539-L1613): each > 0 and divisible by
    vp, the layers left split evenly over the middle ranks, each middle rank's share divisible by vp
    (plan/layout.py uneven_stages)."""
    if not uneven_stages_set(p):
        return
    fields = {"num_layers_in_first_pipeline_stage": p.num_layers_in_first_pipeline_stage,
              "num_layers_in_last_pipeline_stage": p.num_layers_in_last_pipeline_stage, "pp": p.pp, "vp": p.vp}
    if p.pipeline_layout is not None:
        yield _v({**fields, "pipeline_layout": p.pipeline_layout},
                 "pipeline_layout cannot be set with num_layers_in_first/last_pipeline_stage (Megatron-Core refuses "
                 "the two ways of splitting the layers together)",
                 "drop pipeline_layout, or drop num_layers_in_first_pipeline_stage and "
                 "num_layers_in_last_pipeline_stage")
        return
    problems = [m for m in p.pipeline.problems if not m.startswith(UNEVEN_PP_TOO_SMALL)]
    if problems:
        yield _v({**fields, "num_layers": p.model.num_layers},
                 f"the uneven pipeline split is invalid: {'; '.join(problems)}",
                 f"choose first / last layer counts (multiples of vp) whose remainder of the {p.model.num_layers} "
                 "layers divides evenly over the other pp ranks (and by vp on each)")


@rule("uneven-pipeline-pp")
def _uneven_pipeline_pp(p: TrainingPlan) -> Iterator[Violation]:
    """Both first and last stage counts at pp = 1: megatron-core's config accepts it (0.19.2 transformer_config.py
    L2035-L2047: -1 middle ranks divide any remainder), and transformer_block.py get_num_layers_to_build then builds
    only the last count on the one rank -- a smaller model than the test names. Not in Megatron: not differential."""
    if p.pipeline_layout is None and any(m.startswith(UNEVEN_PP_TOO_SMALL) for m in p.pipeline.problems):
        yield _v({"num_layers_in_first_pipeline_stage": p.num_layers_in_first_pipeline_stage,
                  "num_layers_in_last_pipeline_stage": p.num_layers_in_last_pipeline_stage, "pp": p.pp},
                 "first and last pipeline-stage layer counts need two pipeline ranks at least; at pp = 1 Megatron "
                 "would build only the last count's layers",
                 "use pp >= 2, or drop num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage")


@rule("interleaved-microbatches")
def _interleaved_microbatches(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/pipeline_parallel/schedules.py L995-L1015: the interleaved schedule runs micro-batches in
    groups of microbatch_group_size_per_vp_stage (= pp by default, model_parallel_config.py L447-L448), so it needs
    at least pp micro-batches and a remainder of 0 (a remainder below pp raises)."""
    m = p.num_microbatches
    if p.pp > 1 and p.interleaved_vp > 1 and m and (m < p.pp or m % p.pp):
        yield _v({"gbs": p.gbs, "mbs": p.mbs, "dp": p.dp, "pp": p.pp, "vp": p.interleaved_vp},
                 f"{m} micro-batches cannot be scheduled in groups of pp={p.pp} by the interleaved pipeline",
                 f"choose gbs/(mbs*dp) as a multiple of pp, e.g. gbs = {p.pp * p.mbs * p.dp}")


# --------------------------------------------------------------------------------------------------------------
# MoE all-to-all overlap
# --------------------------------------------------------------------------------------------------------------


@rule("a2a-overlap")
def _a2a_overlap(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1852-L1896 and bridge:training/
    comm_overlap.py L470-L505 (overlap_moe_expert_parallel_comm): EP > 1, VP when PP > 1, no full recompute,
    shared-expert overlap off, MTP layers None or 1 ('MTP layernum only supports 1') and, with one MTP layer,
    PP > 1. ``moe`` in recompute_modules is refused too (megatron-core 0.17.1 transformer_config.py L2121-L2123,
    0.19.2 L2697-L2699; 0.16.1 does not). Per release (catalog/bridge.py ``a2a_overlap_mtp_needs_pp``): the
    "one MTP layer needs PP > 1" check is megatron-core 0.17.1's (L2137-L2141), gone in 0.19.2 (L2709-L2713), so
    bridge_version "0.6" takes one MTP layer at pp = 1. Every precision here trains bf16 parameters, so the bf16/fp16
    check cannot fail, and every dispatcher is alltoall or flex."""
    if not p.moe_a2a_overlap:
        return
    if p.ep <= 1:
        yield _v({"moe_a2a_overlap": True, "ep": p.ep}, "a2a overlap needs expert parallelism",
                 "set ep > 1 or moe_a2a_overlap = false")
    if p.pp > 1 and p.interleaved_vp <= 1:
        yield _v({"moe_a2a_overlap": True, "pp": p.pp, "vp": p.vp},
                 "a2a overlap with pipeline parallelism needs virtual pipeline stages",
                 "set vp >= 2 (e.g. 2 for the DSV3/Kimi layout table) or moe_a2a_overlap = false")
    if p.recompute == "full":
        yield _v({"moe_a2a_overlap": True, "recompute": p.recompute},
                 "a2a overlap cannot run with full activation recompute", "use recompute = \"selective\" or \"none\"")
    if recomputes_moe_layer(p):
        yield _v({"moe_a2a_overlap": True, "recompute_modules": p.recompute_modules},
                 "a2a overlap cannot recompute the whole MoE block", "drop \"moe\" from recompute_modules")
    if p.shared_expert_overlap:
        yield _v({"moe_a2a_overlap": True, "moe_shared_expert_overlap": True},
                 "a2a overlap replaces the shared-expert overlap", "set moe_shared_expert_overlap = false")
    mtp = p.effective_mtp_layers
    if mtp not in (None, 1):
        yield _v({"moe_a2a_overlap": True, "mtp_num_layers": mtp},
                 "a2a overlap supports only mtp_num_layers None or 1 ('MTP layernum only supports 1')",
                 "use mtp_num_layers 0 (or unset) for no MTP, or 1")
    elif mtp == 1 and p.pp == 1 and BRIDGE_RELEASES[p.bridge_version].a2a_overlap_mtp_needs_pp:
        yield _v({"moe_a2a_overlap": True, "mtp_num_layers": 1, "pp": p.pp, "bridge_version": p.bridge_version},
                 "a2a overlap with an MTP layer needs pipeline parallelism", "use pp > 1 or moe_a2a_overlap = false")


@rule("a2a-overlap-bridge-vp")
def _a2a_overlap_bridge_vp(p: TrainingPlan) -> Iterator[Violation]:
    """bridge:training/comm_overlap.py (0.4.2 L486-L490, 0.6.2 L494-L498) checks the a2a overlap *before* Megatron-
    Core derives vp from an explicit layout: with pp > 1 virtual_pipeline_model_parallel_size must be set ("If
    enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when
    pipeline_model_parallel_size > 1"). A layout that implies vp > 1 is not enough there (CloudAI's upstream
    constraint for a2a overlap with PP, NVIDIA/cloudai#1025). Stricter than Megatron-Core: not differential."""
    if p.moe_a2a_overlap and p.pp > 1 and (p.vp or 1) <= 1 and p.interleaved_vp > 1:
        yield _v({"moe_a2a_overlap": True, "pp": p.pp, "vp": p.vp, "pipeline_layout": p.pipeline_layout},
                 "Megatron-Bridge checks the a2a overlap before the layout's vp is derived: with pp > 1 it needs vp "
                 "set in the test",
                 f"set vp = {p.interleaved_vp} (the layout's virtual stages per rank), or moe_a2a_overlap = false")


@rule("a2a-overlap-cuda-graph")
def _a2a_overlap_cuda_graph(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1898-L1906 (0.17.1 L2143-L2151): with a2a
    overlap, CUDA graphs must be Transformer Engine's and may not capture ``moe`` or ``mlp`` -- so a full-iteration
    (local) graph, the MoE Echo setup, cannot be combined with the overlap. Per release (catalog/bridge.py
    ``a2a_overlap_full_iteration_graph``): megatron-core 0.19.2 (L2738-L2746) checks only Transformer Engine graphs'
    scope, so under bridge_version "0.6" a full-iteration graph (impl ``full_iteration``, or ``local`` with scope
    ``full_iteration``, which Bridge 0.6.2 treats as one, utils/cuda_graph.py L121-L131) takes the overlap."""
    if p.moe_a2a_overlap and uses_cuda_graph(p):
        bad = {"moe", "mlp"} & set(graph_modules(p))
        if full_iteration_graph(p) and BRIDGE_RELEASES[p.bridge_version].a2a_overlap_full_iteration_graph:
            return
        if p.cuda_graph_impl != "transformer_engine" or bad:
            yield _v({"moe_a2a_overlap": True, "cuda_graph_impl": p.cuda_graph_impl,
                      "cuda_graph_scope": p.cuda_graph_scope},
                     "a2a overlap only works with transformer_engine CUDA graphs that leave moe and mlp uncaptured"
                     + (" (a full_iteration graph needs the local implementation)"
                        if full_iteration_graph(p) else ""),
                     "set moe_a2a_overlap = false, or cuda_graph_impl = \"transformer_engine\" with scopes from "
                     "attn, moe_router, moe_preprocess")


@rule("delay-wgrad")
def _delay_wgrad(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1909-L1913 and bridge:training/
    comm_overlap.py L507-L522: delay_wgrad_compute needs overlap_moe_expert_parallel_comm."""
    if p.delay_wgrad_compute and not p.moe_a2a_overlap:
        yield _v({"delay_wgrad_compute": True, "moe_a2a_overlap": False},
                 "delayed weight-gradient compute only exists inside the a2a overlap schedule",
                 "set moe_a2a_overlap = true or delay_wgrad_compute = false")


# --------------------------------------------------------------------------------------------------------------
# Dispatcher
# --------------------------------------------------------------------------------------------------------------


def cuda_device_name(gpu: GPUSpec) -> str:
    """The name torch.cuda.get_device_properties reports (``NVIDIA B300 SXM6 AC``, ``NVIDIA GB200``)."""
    return device_name(gpu)


def deepep_allowed(gpu: GPUSpec, bridge_version: str = DEFAULT_BRIDGE) -> bool:
    """bridge:training/flex_dispatcher_backend.py apply_flex_dispatcher_backend: compute capability 8.x/9.x, or a
    Blackwell device by name (whole name in 0.3, prefix from 0.4; catalog/bridge.py)."""
    return BRIDGE_RELEASES[bridge_version].deepep_allowed(gpu)


def hybridep_allowed(gpu: GPUSpec, bridge_version: str = DEFAULT_BRIDGE) -> bool:
    """bridge:training/flex_dispatcher_backend.py: compute capability 8.x, 9.x or 10.x (every release read)."""
    return BRIDGE_RELEASES[bridge_version].hybridep_allowed(gpu)


@rule("dispatcher-gpu")
def _dispatcher_gpu(p: TrainingPlan) -> Iterator[Violation]:
    """bridge:training/flex_dispatcher_backend.py apply_flex_dispatcher_backend (0.3-0.6): outside its allowlist
    Bridge only logs a warning and keeps the alltoall dispatcher, so a 'deepep' arm of an A/B would silently measure
    alltoall; validate_flex_dispatcher_backend raises for the same GPUs. The allowlist is the plan's Bridge
    release's (catalog/bridge.py). NCCL EP: bridge-0.6.2:training/flex_dispatcher_backend.py L80-L88 (compute
    capability 9.x / 10.x, "NCCL EP is only applicable to Hopper and Blackwell GPUs ... Falling back to alltoall";
    L121-L125 raises), which is also NCCL EP's own floor (te:common/include/transformer_engine/ep.h L95 "Requires
    SM>=90"). Every GPU of the catalog passes it today; the rule holds for any GPU added."""
    cc = ".".join(map(str, p.gpu.compute_capability))
    release = BRIDGE_RELEASES[p.bridge_version]
    if p.dispatcher == "deepep" and not release.deepep_allowed(p.gpu):
        yield _v({"dispatcher": "deepep", "gpu": p.gpu.name, "compute_capability": cc,
                  "bridge_version": p.bridge_version},
                 f"{cuda_device_name(p.gpu)} is not on Megatron-Bridge {p.bridge_version}'s DeepEP allowlist "
                 f"({release.deepep_rule_text()}); Bridge would silently fall back to alltoall",
                 "use dispatcher = \"hybridep\" on this GPU, a GPU on the DeepEP allowlist, or a container with "
                 "Megatron-Bridge >= 0.4 (bridge_version) for a B300")
    if p.dispatcher == "hybridep" and not release.hybridep_allowed(p.gpu):
        yield _v({"dispatcher": "hybridep", "gpu": p.gpu.name, "compute_capability": cc},
                 f"{p.gpu.name} is not on Megatron-Bridge's HybridEP allowlist (compute capability 8.x/9.x/10.x)",
                 "use dispatcher = \"deepep\" or \"alltoall\"")
    if p.dispatcher == "ncclep" and release.takes_backend("ncclep") and not release.ncclep_allowed(p.gpu):
        yield _v({"dispatcher": "ncclep", "gpu": p.gpu.name, "compute_capability": cc},
                 f"{p.gpu.name} is not on Megatron-Bridge's NCCL EP allowlist (compute capability "
                 f"{'/'.join(f'{m}.x' for m in release.ncclep_cc_majors)}: Hopper and Blackwell); Bridge would fall "
                 "back to alltoall",
                 "use a Hopper or Blackwell GPU for ncclep, or dispatcher = \"alltoall\" / \"hybridep\"")


@rule("dispatcher-bridge-release")
def _dispatcher_bridge_release(p: TrainingPlan) -> Iterator[Violation]:
    """A flex backend the plan's Megatron-Bridge release does not know: its apply_flex_dispatcher_backend logs "Not
    a valid flex dispatcher backend ... Skipping" and leaves the dispatcher as it was (bridge-0.5.1:training/
    flex_dispatcher_backend.py L65-L68; the 0.6.0 / 0.6.1 wheels alike), all-to-all in our payload, which then stops
    the run ('dispatcher downgraded'). ``ncclep`` needs Megatron-Bridge 0.6.2 (L80-L88) and the Megatron-Core it
    runs, 0.19 (mcore-0.19:megatron/core/transformer/transformer_config.py L869; core_v0.18.0 L799 knows only deepep
    and hybridep, and its MoEFlexTokenDispatcher raises "Invalid backend"); catalog/bridge.py lists each release's
    backends."""
    release = BRIDGE_RELEASES[p.bridge_version]
    if flex_backend(p) and not release.takes_backend(p.dispatcher):
        newer = [v for v, r in BRIDGE_RELEASES.items() if r.takes_backend(p.dispatcher)]
        yield _v({"dispatcher": p.dispatcher, "bridge_version": p.bridge_version},
                 f"Megatron-Bridge {p.bridge_version} has no {p.dispatcher!r} flex backend (it logs 'Not a valid flex "
                 "dispatcher backend' and trains with alltoall)",
                 f"set bridge_version = \"{newer[-1] if newer else '?'}\" with a container that ships Megatron-Bridge "
                 f"0.6.2 and megatron-core 0.19 (bridge_version is what the container runs), or another dispatcher")


@rule("flex-dispatcher-ep")
def _flex_dispatcher_ep(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/moe/token_dispatcher.py L1346: the flex dispatcher needs etp*ep > 1; HybridEP's
    buffer asserts a group of at least two ranks (deep_ep/hybrid_ep_buffer.py); NCCL EP: mcore-0.19:megatron/core/
    transformer/moe/token_dispatcher.py L1788 ("NCCL EP dispatcher requires TPxEP > 1") and te:transformer_engine/
    pytorch/ep.py L139-L140 (``ep_bootstrap requires ep_group.size() >= 2``)."""
    if flex_backend(p) and p.etp * p.ep <= 1:
        yield _v({"dispatcher": p.dispatcher, "ep": p.ep, "etp": p.etp},
                 f"the {p.dispatcher} dispatcher needs an expert group of at least two ranks",
                 "use ep > 1, or dispatcher = \"alltoall\"")


@rule("ncclep-capacity-factor")
def _ncclep_capacity_factor(p: TrainingPlan) -> Iterator[Violation]:
    """The ncclep backend sizes every rank's receive buffer once, at the first dispatch, as R = int(ceil64(tokens per
    rank) x top-k x moe_expert_rank_capacity_factor) (mcore-0.19:megatron/core/transformer/moe/token_dispatcher.py
    L1597-L1609; top-k expert-TP-folded, L1792), and a step that receives more than R on any rank traps
    (transformer_config.py L976-L981: "exceeding the budget is a hard error (TransformerEngine/NCCL traps)"; TE
    bootstraps without drop_on_overflow, te:transformer_engine/pytorch/ep.py L111, L132-L133). So:

    - the factor must be set (token_dispatcher.py L1563-L1568 raises ValueError without it; eager mode, where
      None sizes per step, is Megatron-LM main's #6229, not 0.19);
    - R >= the tokens a rank dispatches: NCCL EP's high-throughput group refuses a smaller receive bound
      (nccl_ep:nccl_ep.h L272-L276; libnccl_ep.so ncclEpCreateGroup "HT mode requires max_recv_tokens_per_rank >=
      max_dispatch_tokens_per_rank");
    - R >= tokens per rank x top-k, the balanced share: every token reaches top-k expert slots, so the EP group
      receives G x that in total and some rank at least the average -- a smaller budget traps on the first step
      whatever the routing. Above it, whether a step traps depends on how unbalanced the routing is (Bridge 0.6.2's
      perf recipes use 1.5 for HybridEP's equivalent, perf_recipes/deepseek/common.py L62); the factor that can
      never trap is G x min(top-k, experts per rank) / top-k."""
    if p.dispatcher != "ncclep":
        return
    cf = p.moe_expert_rank_capacity_factor
    if cf is None:
        yield _v({"dispatcher": "ncclep", "moe_expert_rank_capacity_factor": None},
                 "the ncclep backend needs moe_expert_rank_capacity_factor: it sizes the per-rank receive buffer "
                 "(megatron-core raises without it, and a step that receives more traps)",
                 "set moe_expert_rank_capacity_factor (e.g. 1.5, Bridge's perf recipes' budget; above 1.0 leaves room "
                 "for unbalanced routing)")
        return
    recv = p.ncclep_recv_capacity or 0
    sent = p.ncclep_tokens_per_rank
    local = math.ceil(p.seq_length * p.mbs / (p.cp * p.tp))
    share = local * p.flex_topk
    fields = {"moe_expert_rank_capacity_factor": cf, "seq_length": p.seq_length, "mbs": p.mbs, "tp": p.tp,
              "cp": p.cp, "etp": p.etp, "moe_router_topk": p.model.moe_router_topk}
    if recv < sent:
        yield _v(fields,
                 f"the receive budget of {recv} tokens is below the {sent} tokens a rank dispatches: NCCL EP refuses "
                 "to create the group",
                 f"use moe_expert_rank_capacity_factor >= {sent / (sent * p.flex_topk):.4g}")
    elif recv < share:
        yield _v(fields,
                 f"the receive budget of {recv} tokens per rank is below the balanced share of {share} (tokens per "
                 f"rank x top-k): some rank receives at least that every step, so the first step traps",
                 f"use moe_expert_rank_capacity_factor >= {share / (sent * p.flex_topk):.4g} (1.5 leaves room for "
                 "unbalanced routing)")


@rule("ncclep-limits")
def _ncclep_limits(p: TrainingPlan) -> Iterator[Violation]:
    """NCCL EP's published limits (nccl_ep:nccl_ep/common.hpp, the constants its high-throughput kernels are built
    with) for what the ncclep backend hands it (mcore-0.19:megatron/core/transformer/moe/token_dispatcher.py
    L1597-L1621: the expert tp x ep group, num_experts = etp x E, top-k = etp x moe_router_topk, hidden_size):

    - hidden size <= MAX_HIDDEN_DIM 16384 (common.hpp L22), and a bf16 token row a multiple of 16 bytes, hidden % 8
      == 0 (nccl_ep.h L286 "HT requires this configured upper bound to be a multiple of 16 bytes"; device/ht_ep.cuh
      L5320 "HIDDEN_DIM must satisfy TMA alignment"; libnccl_ep.so "(hidden * ncclTypeSize(x->datatype)) %
      sizeof(int4) == 0");
    - top-k <= MAX_NUM_TOPK 32 (common.hpp L23) and <= the experts (libnccl_ep.so ncclEpCreateGroup "num_topk must
      be <= num_experts");
    - experts per rank <= NUM_MAX_LOCAL_EXPERTS 1024 (common.hpp L20);
    - tokens a rank dispatches (rounded up to 64) <= MAX_SUPPORTED_TOKENS_PER_RANK 8192 (common.hpp L28, "Must match
      kernel template in ht_ep_adapter.cu");
    - experts per NVLink (LSA) team a multiple of 4 (libnccl_ep.so "HT dispatch requires experts_per_lsa_team to be
      multiple of 4 (16B prob TMA alignment)"; device/ht_ep.cuh L5316), with the team the group's ranks in one
      NVLink domain (consecutive ranks, as hybridep_ranks_per_domain).

    NCCL EP moves bfloat16 tokens only (te:transformer_engine/pytorch/ep.py L885-L891, L1045): every precision here
    keeps bf16 activations (FP8 quantises inside the GEMMs; megatron-core 0.19.2 sets no dispatch quantisation), so
    that limit cannot fail. What the container must bring is not in the plan, and the payload checks it before the
    model is built (payload/nccl_runtime.py, a one-line MBRIDGE_DISPATCHER_ERROR naming what is missing): a runtime
    NCCL at least as new as the one TE's libnccl_ep.so was built with (2.32.3 for TE 2.20.2: "build NCCL 2.32.3 and
    runtime NCCL 2.31.2 are incompatible" on 4 x H100, 2026-11-27; TE's own ep.py check, 2.30.4, is too loose), that
    NCCL's nccl.h through NCCL_EP_JIT_BUILD_INCLUDE_DIR or NCCL_HOME (NCCL EP compiles its kernels with nvcc at
    bootstrap), nvcc, and SM 9.0+."""
    if p.dispatcher != "ncclep" or not p.ep:
        return
    h, topk = p.model.hidden_size, p.flex_topk
    experts = p.etp * p.model.num_experts
    if h > 16384 or h % 8:
        yield _v({"model": p.model.name, "hidden_size": h},
                 f"NCCL EP carries hidden sizes up to 16384 whose bf16 rows are a multiple of 16 bytes; {h} is not one",
                 "use dispatcher = \"deepep\", \"hybridep\" or \"alltoall\" for this model")
    if topk > 32 or topk > experts:
        yield _v({"etp": p.etp, "moe_router_topk": p.model.moe_router_topk, "num_experts": p.model.num_experts},
                 f"NCCL EP takes a top-k of at most 32 and at most the experts; the flex dispatcher hands it "
                 f"etp x moe_router_topk = {topk}",
                 "lower etp (the recipes use 1)")
    if p.model.num_experts % p.ep == 0 and p.model.num_experts // p.ep > 1024:
        yield _v({"num_experts": p.model.num_experts, "ep": p.ep},
                 f"NCCL EP holds at most 1024 experts per rank; ep={p.ep} leaves {p.model.num_experts // p.ep}",
                 f"raise ep to at least {math.ceil(p.model.num_experts / 1024)}")
    sent = p.ncclep_tokens_per_rank
    if sent > 8192:
        yield _v({"seq_length": p.seq_length, "mbs": p.mbs, "tp": p.tp, "cp": p.cp},
                 f"a rank would dispatch {sent} tokens (seq_length x mbs / (cp x tp), rounded up to 64); NCCL EP's "
                 "kernels take at most 8192",
                 "lower mbs or seq_length, or raise tp / cp (sequence parallelism splits the tokens over tp)")
    if p.model.num_experts % p.ep == 0:
        team = ncclep_ranks_per_team(p)
        per_team = p.model.num_experts // p.ep * team
        if per_team % 4:
            yield _v({"num_experts": p.model.num_experts, "ep": p.ep, "etp": p.etp, "gpu": p.gpu.name},
                     f"NCCL EP's dispatch needs the experts of one NVLink team to be a multiple of 4; {team} ranks x "
                     f"{p.model.num_experts // p.ep} experts per rank = {per_team}",
                     "pick an ep that leaves a multiple of 4 experts per NVLink domain (e.g. 4 or more per rank)")


def ncclep_ranks_per_team(p: TrainingPlan) -> int:
    """Ranks of the ncclep group (expert tp x ep, consecutive ranks in the tp-cp-ep-dp-pp order) that share one
    NVLink (LSA) domain: the GPU type's domain bounded by the job and the group."""
    return max(1, min(p.gpu.nvlink_domain, p.world_size, p.etp * p.ep))


@rule("ncclep-cuda-graph")
def _ncclep_cuda_graph(p: TrainingPlan) -> Iterator[Violation]:
    """mcore-0.19:megatron/core/transformer/moe/token_dispatcher.py L1694-L1701: without moe_ncclep_static_shape
    (which needs the TE op fuser and, with FP8, Blackwell and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, L1533-L1556; the
    payload leaves it off, as Bridge's recipes do) every dispatch narrows the receive buffer with
    ``tokens_per_expert.sum().item()``, a device-to-host sync that a CUDA graph cannot capture: a full_iteration
    graph (which captures the dispatch) fails at capture. The per-layer scopes capture the router and the
    dispatcher's preprocess (top-k), not the dispatch itself."""
    if flex_backend(p) == "ncclep" and full_iteration_graph(p):
        yield _v({"dispatcher": "ncclep", "cuda_graph_impl": p.cuda_graph_impl,
                  "cuda_graph_scope": p.cuda_graph_scope},
                 "the ncclep dispatch syncs with the host every step (dynamic shapes), which a full_iteration CUDA "
                 "graph cannot capture",
                 "use cuda_graph_impl = \"transformer_engine\" with per-layer scopes (attn, moe_router, "
                 "moe_preprocess), no CUDA graph, or another dispatcher for full-iteration graphs")


@rule("ncclep-a2a-overlap-offload")
def _ncclep_a2a_overlap_offload(p: TrainingPlan) -> Iterator[Violation]:
    """mcore-0.19:megatron/core/transformer/transformer_config.py L2729-L2736: with overlap_moe_expert_parallel_comm
    and the ncclep backend, offloading 'expert_fc1' is refused ("it forces expert FC1 to save the raw bf16 input,
    which the overlap path eagerly frees"). ncclep exists only in Megatron-Core 0.19 (bridge_version "0.6"), so the
    check has no 0.17.1 counterpart."""
    if p.dispatcher == "ncclep" and p.moe_a2a_overlap and "expert_fc1" in p.offload_modules:
        yield _v({"dispatcher": "ncclep", "moe_a2a_overlap": True, "offload_modules": list(p.offload_modules)},
                 "Megatron-Core 0.19.2 refuses offloading expert_fc1 with the a2a overlap on the ncclep backend "
                 "(the overlap frees the bf16 input that expert FC1 would keep for the offload)",
                 "remove \"expert_fc1\" from offload_modules, set moe_a2a_overlap = false, or use another dispatcher")


@rule("deepep-network")
def _deepep_network(p: TrainingPlan) -> Iterator[Violation]:
    """UCCL-EP is DeepEP's API over EFA (seed 000: UCCL ships a top-level ``deep_ep`` module); NVIDIA DeepEP's
    stock internode path needs NVSHMEM's IBGDA over InfiniBand verbs, so it cannot cross nodes on EFA. AWS's build of
    NVIDIA DeepEP (``deepep_impl = "nvidia_efa"``: NVSHMEM >= 3.7.0 with the libfabric transport, DeepEP 567632d
    with deepep_aws_efa.patch replacing the IBGDA calls by NVSHMEM host-proxy ones; aws-samples/
    awsome-distributed-training micro-benchmarks/expert-parallelism/deepep-benchmark/README.md at fd3d76d, "How the
    EFA support works") does cross nodes on EFA. UCCL-EP and the libfabric build are built for EFA only."""
    if p.dispatcher != "deepep":
        return
    if p.deepep_impl == "nvidia" and p.network == "efa" and p.num_nodes > 1:
        yield _v({"deepep_impl": "nvidia", "network": "efa", "num_nodes": p.num_nodes},
                 "NVIDIA DeepEP's stock build cannot run internode over EFA (it needs NVSHMEM IBGDA over InfiniBand)",
                 "set deepep_impl = \"uccl\" (UCCL-EP) or \"nvidia_efa\" (NVIDIA DeepEP over NVSHMEM's libfabric "
                 "transport, AWS's build) on EFA systems")
    if p.deepep_impl in ("uccl", "nvidia_efa") and p.network != "efa" and p.num_nodes > 1:
        what = "UCCL-EP" if p.deepep_impl == "uccl" else "the libfabric (EFA) build of NVIDIA DeepEP"
        yield _v({"deepep_impl": p.deepep_impl, "network": p.network, "num_nodes": p.num_nodes},
                 f"{what} is built for EFA; this system's network is not EFA",
                 "set deepep_impl = \"nvidia\", or run on a system whose network is EFA")


@rule("hybridep-uccl")
def _hybridep_uccl(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/moe/fused_a2a.py L268-L273 imports ``HybridEPBuffer`` from ``deep_ep``; UCCL's
    ``deep_ep`` shadow module has no HybridEPBuffer, so in a UCCL image HAVE_HYBRIDEP is False and
    token_dispatcher.py L996-L1000 raises ImportError at the first MoE layer."""
    if p.dispatcher == "hybridep" and p.deepep_impl == "uccl":
        yield _v({"dispatcher": "hybridep", "deepep_impl": "uccl"},
                 "HybridEP is not available when UCCL's deep_ep shadows NVIDIA's (no HybridEPBuffer)",
                 "set deepep_impl = \"nvidia\" for hybridep points (NVIDIA DeepEP's hybrid-ep build)")


def hybridep_ranks_per_domain(p: TrainingPlan) -> int:
    """deep_ep/hybrid_ep_buffer.py (DeepEP hybrid-ep): ``min(NVLINK_DOMAIN_SIZE // rank_stride, group_size)``.
    The flex group is the expert tp x ep group, consecutive ranks in the tp-cp-ep-dp-pp order (stride 1); the
    NVLink domain is the GPU type's (8 on HGX, 72 on NVL72) bounded by the job."""
    domain = min(p.gpu.nvlink_domain, p.world_size)
    return max(1, min(domain, p.etp * p.ep))


@rule("hybridep-nvlink-domain")
def _hybridep_nvlink_domain(p: TrainingPlan) -> Iterator[Violation]:
    """deep_ep/hybrid_ep_buffer.py (DeepEP hybrid-ep, HybridEpBuffer.__init__): the group size must be divisible
    by the ranks per NVLink domain ('The number of ranks should be divisible by the number of ranks per node')."""
    if p.dispatcher != "hybridep":
        return
    group = p.etp * p.ep
    per_domain = hybridep_ranks_per_domain(p)
    if group > 1 and group % per_domain:
        yield _v({"dispatcher": "hybridep", "ep": p.ep, "etp": p.etp, "gpu": p.gpu.name,
                  "nvlink_domain": p.gpu.nvlink_domain},
                 f"the HybridEP group of {group} ranks does not split into NVLink domains of {per_domain} ranks",
                 f"use an etp*ep that is a multiple of {per_domain} (or at most {per_domain})")


@rule("shared-expert-overlap")
def _shared_expert_overlap(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1090-L1095: moe_shared_expert_overlap
    only works with the alltoall dispatcher (Bridge's apply_flex_dispatcher_backend turns it off for flex)."""
    if p.shared_expert_overlap and flex_backend(p):
        yield _v({"moe_shared_expert_overlap": True, "dispatcher": p.dispatcher},
                 "the shared-expert overlap only works with the alltoall dispatcher",
                 "set moe_shared_expert_overlap = false for deepep/hybridep")


# --------------------------------------------------------------------------------------------------------------
# CPU offloading, CUDA graphs, recompute, FSDP, precision
# --------------------------------------------------------------------------------------------------------------


@rule("cpu-offloading")
def _cpu_offloading(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1137-L1152 (layers < num_layers, no PP,
    no activation recompute) and L1722-L1723 (no CUDA graphs); CloudAI constraints 10 and 12."""
    if not p.cpu_offloading:
        return
    n = p.cpu_offloading_num_layers
    if n >= p.model.num_layers:
        yield _v({"cpu_offloading_num_layers": n, "num_layers": p.model.num_layers},
                 f"CPU offloading can only cover fewer than {p.model.num_layers} layers",
                 f"use cpu_offloading_num_layers < {p.model.num_layers}")
    if p.pp > 1:
        yield _v({"cpu_offloading_num_layers": n, "pp": p.pp}, "CPU offloading does not support pipeline parallelism",
                 "use pp = 1 or cpu_offloading_num_layers = 0")
    if p.recompute != "none":
        yield _v({"cpu_offloading_num_layers": n, "recompute": p.recompute},
                 "CPU offloading does not work with activation recompute", "use recompute = \"none\"")
    if uses_cuda_graph(p):
        yield _v({"cpu_offloading_num_layers": n, "cuda_graph_impl": p.cuda_graph_impl},
                 "CUDA graphs are not supported with CPU offloading", "use cuda_graph_impl = \"none\"")


@rule("cuda-graph")
def _cuda_graph(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential.* megatron/core/transformer/transformer_config.py L1716-L1798 (CloudAI constraints 13-17 are
    a subset): full_iteration only with the local implementation; not moe and moe_router together; moe_preprocess
    needs moe_router; mlp only where dense layers exist; moe only for drop-and-pad MoE (these models are dropless);
    full recompute only with a full_iteration graph; transformer_engine graphs cannot capture moe_router while the
    whole MoE block is recomputed. A full-iteration graph is either spelling (predicates.full_iteration_graph) that
    captures no per-layer module besides: megatron-core 0.19.2 L2461-L2463 refuses ``cuda_graph_impl =
    "full_iteration"`` with modules (and migrates ``"local"`` + scope full_iteration to it first,
    cuda_graph_config.py L11); 0.17.1 L2020-L2027 wants the scope to be exactly ``[full_iteration]`` for full
    recompute."""
    if not uses_cuda_graph(p):
        return
    scope = graph_modules(p)  # the per-layer modules
    whole = full_iteration_graph(p) and not scope  # a full-iteration graph, nothing per layer besides
    fields = {"cuda_graph_impl": p.cuda_graph_impl, "cuda_graph_scope": p.cuda_graph_scope}
    release = BRIDGE_RELEASES[p.bridge_version]
    if release.local_graph_full_iteration_only and p.cuda_graph_impl == "local" and not whole:
        yield _v({**fields, "bridge_version": p.bridge_version},
                 f"Megatron-Bridge {p.bridge_version} runs cuda_graph_impl = \"local\" only as a full_iteration "
                 "graph (utils/cuda_graph.py L134-L155 in 0.6)",
                 "use cuda_graph_impl = \"transformer_engine\" for per-layer scopes, or cuda_graph_scope = "
                 "\"full_iteration\"")
    if p.cuda_graph_impl == "transformer_engine" and "full_iteration" in p.cuda_graph_scope:
        yield _v(fields, "a full_iteration CUDA graph needs the local implementation",
                 "set cuda_graph_impl = \"local\" for full_iteration")
    if p.cuda_graph_impl == "full_iteration" and scope:
        yield _v(fields, f"a full_iteration CUDA graph captures the whole iteration; it takes no per-layer scope "
                 f"({', '.join(scope)}) beside it (megatron-core 0.19.2 transformer_config.py L2461-L2463)",
                 "leave cuda_graph_scope empty (or \"full_iteration\"), or use cuda_graph_impl = "
                 "\"transformer_engine\" for per-layer scopes")
    if "moe" in scope and "moe_router" in scope:
        yield _v(fields, "cuda_graph_scope cannot hold both moe and moe_router", "keep one of moe and moe_router")
    if "moe_preprocess" in scope and "moe_router" not in scope:
        yield _v(fields, "the moe_preprocess CUDA graph needs the moe_router graph", "add moe_router to the scope")
    if "mlp" in scope and p.model.first_k_dense == 0:
        yield _v({**fields, "model": p.model.name}, "the mlp CUDA graph needs dense layers, this model has none",
                 "drop mlp from the scope")
    if "moe" in scope:
        yield _v({**fields, "model": p.model.name},
                 "the moe CUDA graph needs drop-and-pad MoE (a capacity factor); these models are dropless",
                 "capture moe_router (and moe_preprocess) instead of moe")
    if p.recompute == "full" and not whole:
        yield _v({**fields, "recompute": "full"}, "full recompute only works with a full_iteration CUDA graph",
                 "use recompute = \"selective\", or a full-iteration graph (cuda_graph_impl = \"local\" with scope "
                 "full_iteration; or \"full_iteration\" with bridge_version = \"0.6\")")
    if p.cuda_graph_impl == "transformer_engine" and recomputes_moe_layer(p) and "moe_router" in scope:
        yield _v({**fields, "recompute_modules": p.recompute_modules},
                 "recomputing the MoE block cannot wrap a transformer_engine moe_router graph",
                 "drop moe from recompute_modules or moe_router from the scope")


@rule("recompute-modules")
def _recompute_modules(p: TrainingPlan) -> Iterator[Violation]:
    """*Differential* (the bf16 parts). megatron/core/transformer/transformer_config.py L1230-L1239: recomputing
    shared_experts cannot be combined with moe_shared_expert_overlap; L1241-L1247: FP8 delayed scaling cannot
    recompute moe_act or layernorm."""
    if p.recompute != "selective":
        return
    mods = set(p.recompute_modules)
    if "shared_experts" in mods and p.shared_expert_overlap:
        yield _v({"recompute_modules": p.recompute_modules, "moe_shared_expert_overlap": True},
                 "shared_experts recompute cannot run with the shared-expert overlap",
                 "drop shared_experts from recompute_modules, or set moe_shared_expert_overlap = false (the payload "
                 "turns it on for alltoall without a2a overlap)")
    if p.precision == "fp8_delayed" and mods & {"moe_act", "layernorm"}:
        yield _v({"recompute_modules": p.recompute_modules, "precision": p.precision},
                 "FP8 delayed scaling cannot recompute moe_act or layernorm",
                 "use fp8_tensorwise/fp8_blockwise/mxfp8, or drop moe_act and layernorm from recompute_modules")


@rule("megatron-fsdp")
def _megatron_fsdp(p: TrainingPlan) -> Iterator[Violation]:
    """Megatron FSDP: Megatron-LM megatron/training/arguments.py L1186 (core_v0.16.1 tag) refuses Muon with it;
    CloudAI constraints 5 and 6 (cloudai:megatron_bridge.py) refuse CUDA graphs and PP/CP/VP > 1 with FSDP."""
    if not p.use_megatron_fsdp:
        return
    if p.optimizer == "muon":
        yield _v({"use_megatron_fsdp": True, "optimizer": "muon"}, "Muon does not support Megatron FSDP",
                 "use optimizer = \"adam\" or use_megatron_fsdp = false")
    full_iteration_ok = BRIDGE_RELEASES[p.bridge_version].fsdp_full_iteration_graph
    if uses_cuda_graph(p) and not (full_iteration_ok and full_iteration_graph(p)):
        yield _v({"use_megatron_fsdp": True, "cuda_graph_impl": p.cuda_graph_impl,
                  "bridge_version": p.bridge_version},
                 "Megatron FSDP cannot run with CUDA graphs"
                 + (" other than a full_iteration graph" if full_iteration_ok else " in this release"),
                 "use cuda_graph_impl = \"none\""
                 + (" or a full_iteration graph (cuda_graph_impl = \"full_iteration\", or \"local\" with "
                    "cuda_graph_scope = \"full_iteration\")" if full_iteration_ok else ""))
    if p.pp > 1 or p.cp > 1 or (p.vp or 1) > 1:
        yield _v({"use_megatron_fsdp": True, "pp": p.pp, "cp": p.cp, "vp": p.vp},
                 "Megatron FSDP runs here with pp = cp = vp = 1 only", "use pp = 1, cp = 1, vp unset")


@rule("recipe062-fields")
def _recipe062_fields(p: TrainingPlan) -> Iterator[Violation]:
    """Settings Megatron-Bridge 0.6.2's perf recipes use. Per release: catalog/bridge.py ``newer_fields``. The
    checks are megatron-core 0.19.2's (megatron/core/transformer/transformer_config.py): fp8_output_proj needs FP8
    and the mxfp8 recipe (L1442-L1448); offload_modules not with cpu_offloading, attn_proj only with core_attn
    (L1848-L1870), fused_group_mlp only with the TE op fuser and without expert_fc1 / moe_act (L1895-L1903);
    moe_paged_stash needs moe_expert_rank_capacity_factor, no cpu_offloading, and no MoE module
    offloaded (L1904-L1920); delay_wgrad_compute needs overlap_moe_expert_parallel_comm (L2749-L2752); outer DP
    sharding "optim" is HSDP and needs Megatron FSDP with several optimizer instances
    (distributed_data_parallel_config.py L162, L206)."""
    release = BRIDGE_RELEASES[p.bridge_version]
    used = {"moe_paged_stash": p.moe_paged_stash, "use_transformer_engine_op_fuser": p.use_transformer_engine_op_fuser,
            "fp8_output_proj": p.fp8_output_proj, "offload_modules": bool(p.offload_modules),
            "outer_dp_sharding_strategy": p.outer_dp_sharding_strategy != "no_shard",
            "cuda_graph_impl=full_iteration": p.cuda_graph_impl == "full_iteration",
            "offload_modules=fused_group_mlp": "fused_group_mlp" in p.offload_modules,
            "fine_grained_offloading_max_inflight_offloads":
                p.fine_grained_offloading_max_inflight_offloads is not None}
    for name, on in used.items():
        if on and name not in release.newer_fields:
            field, _, value = name.partition("=")
            yield _v({field: value or getattr(p, field), "bridge_version": p.bridge_version},
                     f"{field}{' = ' + repr(value) if value else ''} is a setting of Megatron-Bridge 0.6.2's "
                     f"Megatron-Core that bridge_version {p.bridge_version!r} does not take "
                     "(catalog/bridge.py newer_fields)",
                     f"use bridge_version = \"0.6\" (a container with Megatron-Bridge 0.6.2), or remove "
                     f"{value + ' from ' + field if value and field == 'offload_modules' else field}")
    if p.fp8_output_proj and p.precision != "mxfp8":
        yield _v({"fp8_output_proj": True, "precision": p.precision}, "fp8_output_proj needs the mxfp8 FP8 recipe",
                 "use precision = \"mxfp8\" or fp8_output_proj = false")
    if p.fp8_dot_product_attention and p.precision == "bf16":
        yield _v({"fp8_dot_product_attention": True, "precision": p.precision},
                 "FP8 attention needs an FP8 precision", "use an FP8 precision or fp8_dot_product_attention = false")
    if p.offload_modules and p.cpu_offloading:
        yield _v({"offload_modules": ",".join(p.offload_modules), "cpu_offloading_num_layers":
                  p.cpu_offloading_num_layers}, "fine-grained activation offloading cannot run with cpu_offloading",
                 "drop one of them")
    if "attn_proj" in p.offload_modules and "core_attn" not in p.offload_modules:
        yield _v({"offload_modules": ",".join(p.offload_modules)}, "attn_proj is offloaded only with core_attn",
                 "add core_attn to offload_modules")
    if "fused_group_mlp" in p.offload_modules:  # 0.19.2 transformer_config.py L1895-L1903
        if not p.use_transformer_engine_op_fuser:
            yield _v({"offload_modules": ",".join(p.offload_modules), "use_transformer_engine_op_fuser": False},
                     "offloading fused_group_mlp needs the TE op fuser", "set use_transformer_engine_op_fuser = true")
        partial = sorted({"expert_fc1", "moe_act"} & set(p.offload_modules))
        if partial:
            yield _v({"offload_modules": ",".join(p.offload_modules)},
                     f"fused_group_mlp already offloads the whole grouped MLP, with {', '.join(partial)} too it is "
                     "refused", f"remove {', '.join(partial)} from offload_modules")
    if p.moe_paged_stash:
        if p.moe_expert_rank_capacity_factor is None:
            yield _v({"moe_paged_stash": True, "moe_expert_rank_capacity_factor": None},
                     "moe_paged_stash needs moe_expert_rank_capacity_factor", "set e.g. "
                     "moe_expert_rank_capacity_factor = 1.5 (Bridge 0.6.2's recipes)")
        clash = sorted({"expert_fc1", "moe_act", "fused_group_mlp"} & set(p.offload_modules))
        if clash:
            yield _v({"moe_paged_stash": True, "offload_modules": ",".join(p.offload_modules)},
                     f"paged stash already covers {', '.join(clash)}",
                     f"remove {', '.join(clash)} from offload_modules")
    if p.delay_wgrad_compute and not p.moe_a2a_overlap:
        yield _v({"delay_wgrad_compute": True, "moe_a2a_overlap": False},
                 "delay_wgrad_compute needs the expert-parallel a2a overlap", "set moe_a2a_overlap = true")
    if p.outer_dp_sharding_strategy == "optim" and not (p.use_megatron_fsdp and
                                                         p.num_distributed_optimizer_instances > 1):
        yield _v({"outer_dp_sharding_strategy": "optim", "use_megatron_fsdp": p.use_megatron_fsdp,
                  "num_distributed_optimizer_instances": p.num_distributed_optimizer_instances},
                 "outer data-parallel sharding (HSDP) needs Megatron FSDP and several optimizer instances",
                 "set use_megatron_fsdp = true and num_distributed_optimizer_instances > 1")


# The offload modules that sit inside the MoE layer (megatron-core 0.19.2 transformer_config.py L1875-L1877)
OFFLOAD_INSIDE_MOE = ("moe_act", "expert_fc1", "fused_group_mlp")


@rule("offload-recompute-moe")
def _offload_recompute_moe(p: TrainingPlan) -> Iterator[Violation]:
    """megatron-core 0.19.2 transformer_config.py L1874-L1884: with ``moe`` in recompute_modules the whole MoE layer
    runs in one checkpoint, and offloading an activation inside it (moe_act, expert_fc1, fused_group_mlp) is refused
    ("Cannot offload ... while recomputing the entire MoE layer ... redundant and will cause errors"). 0.17.1
    (L1448-L1472) has no such check, but the same offload hooks run inside the same checkpoint there; refused in
    both (docs/rules_by_release.md)."""
    inside = [m for m in OFFLOAD_INSIDE_MOE if m in p.offload_modules]
    if inside and recomputes_moe_layer(p):
        yield _v({"offload_modules": ",".join(p.offload_modules), "recompute_modules": ",".join(p.recompute_modules)},
                 f"cannot offload {', '.join(inside)} while recomputing the entire MoE layer ('moe' in "
                 "recompute_modules wraps the MoE forward in one checkpoint; megatron-core 0.19.2 refuses it)",
                 f"remove moe from recompute_modules, or {', '.join(inside)} from offload_modules")


@rule("offload-cuda-graph")
def _offload_cuda_graph(p: TrainingPlan) -> Iterator[Violation]:
    """megatron-core 0.19.2 transformer_config.py L2596-L2642, fine-grained activation offloading with CUDA graphs:
    a full-iteration graph needs ``fine_grained_offloading_max_inflight_offloads`` set (L2634-L2642; the default
    None is refused), the graph may not capture ``moe`` (L2627-L2629: cuda-graph refuses that scope for these
    dropless models anyway) and needs warm-up steps (L2630-L2633: the recipes keep Megatron's default 3). A per-layer
    ``local`` graph (L2598-L2626) is not reachable through Bridge 0.6.2 (cuda-graph). 0.17.1 checks none of it."""
    if p.offload_modules and uses_cuda_graph(p) and p.cuda_graph_warmup_steps == 0:  # 0.19.2 TC L2630-L2633
        yield _v({"offload_modules": ",".join(p.offload_modules), "cuda_graph_impl": p.cuda_graph_impl,
                  "cuda_graph_warmup_steps": 0},
                 "activation offloading with CUDA graphs needs warm-up steps before the capture",
                 "set cuda_graph_warmup_steps >= 1 (or leave it unset: the recipe's 3)")
    release = BRIDGE_RELEASES[p.bridge_version]
    if (p.offload_modules and full_iteration_graph(p) and release.offload_full_iteration_needs_inflight_cap
            and p.fine_grained_offloading_max_inflight_offloads is None):
        yield _v({"offload_modules": ",".join(p.offload_modules), "cuda_graph_impl": p.cuda_graph_impl,
                  "fine_grained_offloading_max_inflight_offloads": None},
                 "activation offloading inside a full-iteration CUDA graph needs a cap on in-flight offloads "
                 "(megatron-core 0.19.2 refuses it unset)",
                 "set fine_grained_offloading_max_inflight_offloads = 1 (Bridge 0.6.2's GB300 HSDP recipe), or "
                 "drop offload_modules or the full-iteration graph")


@rule("offload-optimizer-states")
def _offload_optimizer_states(p: TrainingPlan) -> Iterator[Violation]:
    """NVIDIA's Megatron-MoE-ModelZoo GB200 DeepSeek-V3 config passes ``--offload-optimizer-states``, a flag of
    Megatron-LM's moe_dev branch ("--offload-optimizer-states requires dev branch", best_practice/deepseek-v3/
    run_deepseek_v3_gb200.sh at fea5a16 L12). Neither megatron-core 0.17.1 nor 0.19.2 has it (no
    ``offload_optimizer_states`` in either wheel's OptimizerConfig; Bridge 0.6.2 sets the attribute only in a
    DeepSeek-V4 recipe, where 0.19.2 ignores it), so no container this project targets can run it."""
    if p.offload_optimizer_states:
        yield _v({"offload_optimizer_states": True, "bridge_version": p.bridge_version},
                 "--offload-optimizer-states is a flag of Megatron-LM's moe_dev branch; no released Megatron-Core "
                 "(0.17.1, 0.19.2) has it, so the run would train without the offload it asks for",
                 "set offload_optimizer_states = false; optimizer_cpu_offload = true (with "
                 "use_precision_aware_optimizer) is the released way to move optimizer state to the host")


@rule("muon-mxfp8-param-gather")
def _muon_mxfp8_param_gather(p: TrainingPlan) -> Iterator[Violation]:
    """Muon trains with a non-distributed optimizer (Megatron-Core 0.17.1 optimizer/muon.py L346-L358:
    Float16OptimizerWithFloat16Params), whose step in 0.17.1 copies MXFP8 parameters into a gather buffer only
    DistributedOptimizer defines (optimizer/optimizer.py L580-L584, distrib_optimizer.py L2550); 0.19.2 falls back
    (catalog/bridge.py ``mxfp8_gather_needs_distributed_optimizer``). Upstream's Kimi-K2 MXFP8 configs switch the
    gather off for Muon in both releases (Bridge 0.4.2 scripts/performance/configs/kimi/kimi_llm_pretrain.py L38-L44;
    0.6.2 perf_recipes/kimi/gb300/kimi_k2.py L142-L143), and so does the payload (payload/train/bridge.py
    MUON_MXFP8_OFF); where the release would fail, a test that asks for the gather is refused."""
    release = BRIDGE_RELEASES[p.bridge_version]
    if (p.optimizer == "muon" and p.precision == "mxfp8" and p.fp8_param_gather
            and release.mxfp8_gather_needs_distributed_optimizer):
        yield _v({"optimizer": "muon", "precision": "mxfp8", "fp8_param_gather": True},
                 f"Muon's optimizer has no distributed MXFP8 param-gather buffer: with bridge_version "
                 f"{p.bridge_version!r} (Megatron-Core 0.17.1) the first optimizer step would fail",
                 "set fp8_param_gather = false (upstream's Kimi-K2 MXFP8 configs do), optimizer = \"adam\", or "
                 "bridge_version = \"0.6\"")


@rule("optimizer-cpu-offload")
def _optimizer_cpu_offload(p: TrainingPlan) -> Iterator[Violation]:
    """Megatron-Core's optimizer CPU offload, the same in 0.17.1 and 0.19.2: a HybridDeviceOptimizer wraps Adam or
    SGD only (optimizer/__init__.py, 0.17.1 L489-L521, 0.19.2 L502-L534; the Muon path, emerging_optimizers.py, has
    none); Megatron-LM asserts it runs with the precision-aware optimizer, whose code path it reuses, and that an FP8
    parameter gather then uses the delayed recipe (megatron/training/arguments.py: 0.17.1 L1496-L1503, 0.19.2
    L1803-L1811). Megatron-Bridge checks neither, so the rule does."""
    if not p.optimizer_cpu_offload:
        return
    if p.optimizer != "adam":
        yield _v({"optimizer_cpu_offload": True, "optimizer": p.optimizer},
                 f"Megatron-Core offloads only an Adam (or SGD) optimizer to the CPU; {p.optimizer!r} has no offload",
                 "use optimizer = \"adam\" or optimizer_cpu_offload = false")
    if not p.precision_aware_optimizer:
        yield _v({"optimizer_cpu_offload": True, "precision_aware_optimizer": False},
                 "the optimizer's CPU offload needs the precision-aware optimizer (Megatron-LM asserts it), which "
                 "this point's recipe / engine does not use (engine mcore; the kimi_k2 recipe switches it off)",
                 "set use_precision_aware_optimizer = true (engine bridge), or optimizer_cpu_offload = false")
    if p.fp8_param_gather and p.precision != "fp8_delayed":
        yield _v({"optimizer_cpu_offload": True, "fp8_param_gather": True, "precision": p.precision},
                 "with the optimizer's CPU offload an FP8 parameter gather needs the delayed FP8 recipe",
                 "set fp8_param_gather = false or precision = \"fp8_delayed\"")


@rule("fp8-recipe-gpu")
def _fp8_recipe(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/fp8_utils.py L565-L580 (core_v0.16.1) hands the recipe to Transformer Engine, whose
    check_mxfp8_support / check_fp8_support (transformer_engine/pytorch/fp8.py) refuse MXFP8 below compute
    capability 10.0 and FP8 below 8.9, and NVFP4 (``check_nvfp4_support``) below 10.0; the catalog lists each GPU's
    recipes."""
    if p.precision == "bf16":
        return
    recipe = p.precision.removeprefix("fp8_")
    if recipe not in p.gpu.fp8_recipes:
        allowed = ", ".join("fp8_" + r if r not in ("mxfp8", "nvfp4") else r for r in sorted(p.gpu.fp8_recipes))
        yield _v({"precision": p.precision, "gpu": p.gpu.name}, f"{p.precision} is not available on {p.gpu.name}",
                 f"use one of bf16, {allowed}")


# --------------------------------------------------------------------------------------------------------------
# MoE Echo (seed 003)
# --------------------------------------------------------------------------------------------------------------


@rule("echo-dispatcher")
def _echo_dispatcher(p: TrainingPlan) -> Iterator[Violation]:
    """Victarry/Megatron-MoE-Echo README (seed 003): '--moe-echo-expert-dispatcher-type hybridep # Only hybridep
    support sync-free dispatch'; moe_layer.py raises for any other expert dispatcher type."""
    if p.echo is not None and p.dispatcher != "hybridep":
        yield _v({"echo": True, "dispatcher": p.dispatcher}, "MoE Echo needs the hybridep dispatcher",
                 "set dispatcher = \"hybridep\" for Echo points")


@rule("echo-experts")
def _echo_experts(p: TrainingPlan) -> Iterator[Violation]:
    """Victarry/Megatron-MoE-Echo megatron/core/transformer/transformer_config.py (moe_enable_echo block):
    moe_num_echo_experts % expert_model_parallel_size == 0 (the routed experts must divide by EP too:
    experts-per-ep)."""
    if p.echo is not None and p.echo.num_echo_experts % p.ep:
        yield _v({"num_echo_experts": p.echo.num_echo_experts, "ep": p.ep},
                 f"{p.echo.num_echo_experts} echo experts cannot be spread evenly over ep={p.ep}",
                 f"use a num_echo_experts that is a multiple of {p.ep}")


@rule("echo-grouped-gemm")
def _echo_grouped_gemm(p: TrainingPlan) -> Iterator[Violation]:
    """Seed 003: '--moe-use-device-initiated-grouped-gemm # only available for Blackwell GPUs MXFP8 GEMM' (the
    CUTLASS device-initiated kernel is built for sm_100a and runs MXFP8 only)."""
    if p.echo is None or not p.echo.device_initiated_grouped_gemm:
        return
    if not p.gpu.is_blackwell or p.precision != "mxfp8":
        yield _v({"device_initiated_grouped_gemm": True, "gpu": p.gpu.name, "precision": p.precision},
                 "the device-initiated grouped GEMM needs a Blackwell GPU and mxfp8",
                 "use precision = \"mxfp8\" on B200/B300/GB200/GB300, or device_initiated_grouped_gemm = false")


@rule("echo-cuda-graph")
def _echo_cuda_graph(p: TrainingPlan) -> Iterator[Violation]:
    """Seed 003: a full_iteration CUDA graph needs the sync-free path, which only exists with
    '--moe-received-token-capacity' set ('if not set, sync-version will be used': device-to-host copies that a
    graph cannot capture). The overlap side of 'full-iteration graph vs a2a overlap' is a2a-overlap-cuda-graph."""
    if p.echo is not None and full_iteration_graph(p) and p.echo.received_token_capacity is None:
        yield _v({"echo": True, "cuda_graph_scope": p.cuda_graph_scope, "received_token_capacity": None},
                 "a full_iteration CUDA graph with Echo needs the sync-free dispatch",
                 "set echo.received_token_capacity (e.g. 2.0)")


# --------------------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------------------


@rule("memory")
def _memory(p: TrainingPlan) -> Iterator[Violation]:
    """plan/memory.py estimate_memory: weights + gradients + optimizer state + in-flight activations + dispatcher
    buffers + runtime on the busiest pipeline rank, with the estimate's error band. Rejected only when the estimate
    is above the GPU's capacity by more than the band and the test keeps ``memory_check = "reject"``; a *tight*
    point (within the band) runs with a warning (``memory_caution``). Skipped where the parallel layout itself is
    invalid (other rules report that)."""
    if p.memory_check != "reject" or not (p.dp and p.expert_dp and p.experts_per_rank):
        return
    est = estimate_memory(p)
    if est.verdict == "does not fit":
        yield _v({"model": p.model.name, "gpu": p.gpu.name, "tp": p.tp, "pp": p.pp, "vp": p.vp, "ep": p.ep,
                  "etp": p.etp, "mbs": p.mbs, "recompute": p.recompute, "optimizer": p.optimizer},
                 f"estimated peak memory does not fit: {est.summary()}",
                 f"{', '.join(_memory_fixes(p))}; if you know better than the estimate, set memory_check = "
                 "\"warn\" in the test's [cmd_args] (the job then runs with a warning)")


def _memory_fixes(p: TrainingPlan) -> list[str]:
    """What could bring this point's memory down, the usual first, then what its own settings leave unused."""
    fixes = ["lower mbs", "recompute (selective moe_act/mla_up_proj, or full)", "raise pp or ep"]
    if p.etp < p.tp and p.model.num_experts:
        # Megatron-Core sets expert_tensor_parallel_size to tp when a configuration leaves it unset
        # (parallel_state.py initialize_model_parallel); here etp is 1 unless the test says otherwise
        fixes.append(f"split the experts over tensor parallelism too (etp = {p.tp}: Megatron-Core's own default "
                     "when a configuration leaves it unset; this project's is 1)")
    if not optimizer_distributed(p):
        fixes.append("use the distributed optimizer")
    if not p.optimizer_cpu_offload and p.optimizer == "adam" and p.precision_aware_optimizer:
        fixes.append("offload the optimizer to the CPU (optimizer_cpu_offload = true)")
    return fixes


def memory_caution(p: TrainingPlan) -> str | None:
    """The warning an accepted point gets about memory: tight, or not fitting under ``memory_check = "warn"``."""
    if p.memory_check == "off" or not (p.dp and p.expert_dp and p.experts_per_rank):
        return None
    est = estimate_memory(p)
    if est.verdict == "tight":
        return (f"memory is tight: {est.summary()}. The job runs; the estimate cannot tell whether it fits "
                "(raise pp/ep or recompute more for headroom)")
    if est.verdict == "does not fit":
        return f"memory does not fit (memory_check = \"warn\": the job runs anyway): {est.summary()}"
    return None
