"""Rules for the training workload: what Megatron-Core / Megatron-Bridge would reject at step 0.

File references are to Megatron-LM core_r0.16 (megatron/core/...) and Megatron-Bridge 0.4 (src/megatron/bridge/...).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..plan import TrainingPlan
from .base import RuleSet, Violation

TRAINING_RULES: RuleSet[TrainingPlan] = RuleSet("training")
rule = TRAINING_RULES.rule


@rule("world-size-model-parallel")
def _world_vs_model_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py initialize_model_parallel: world_size % (tp*pp*cp) must be 0."""
    if p.world_size % p.model_parallel:
        yield Violation(
            "",
            {"num_nodes": p.num_nodes, "gpus_per_node": p.gpus_per_node, "tp": p.tp, "pp": p.pp, "cp": p.cp},
            f"world size {p.world_size} is not divisible by tp*pp*cp = {p.model_parallel}",
            "pick tp, pp, cp whose product divides num_nodes * gpus_per_node",
        )


@rule("world-size-expert-parallel")
def _world_vs_expert_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/parallel_state.py (expert grid): world_size % (etp*ep*pp) must be 0."""
    denom = p.etp * p.ep * p.pp
    if p.world_size % denom:
        yield Violation(
            "",
            {"world_size": p.world_size, "etp": p.etp, "ep": p.ep, "pp": p.pp},
            f"world size {p.world_size} is not divisible by etp*ep*pp = {denom}",
            "pick ep (and etp) so that etp*ep*pp divides the world size",
        )


@rule("global-batch")
def _global_batch(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/num_microbatches_calculator.py: gbs % (mbs*dp) must be 0."""
    if p.dp and p.gbs % (p.mbs * p.dp):
        yield Violation(
            "",
            {"gbs": p.gbs, "mbs": p.mbs, "dp": p.dp},
            f"global batch {p.gbs} is not divisible by mbs*dp = {p.mbs * p.dp}",
            f"use a gbs that is a multiple of {p.mbs * p.dp}",
        )


@rule("experts-per-ep")
def _experts_vs_ep(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/moe/moe_layer.py: num_moe_experts % ep must be 0."""
    if p.model.num_experts % p.ep:
        yield Violation(
            "",
            {"model": p.model.name, "num_experts": p.model.num_experts, "ep": p.ep},
            f"{p.model.num_experts} experts cannot be split evenly over ep={p.ep}",
            "use an ep that divides the number of experts",
        )


@rule("heads-per-tp")
def _heads_vs_tp(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/attention.py: num_attention_heads % tp must be 0."""
    if p.model.num_attention_heads % p.tp:
        yield Violation(
            "",
            {"model": p.model.name, "num_attention_heads": p.model.num_attention_heads, "tp": p.tp},
            f"{p.model.num_attention_heads} attention heads cannot be split over tp={p.tp}",
            "use a tp that divides the number of attention heads",
        )


@rule("sequence-parallel")
def _sequence_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/tensor_parallel/mappings.py: with sequence parallelism the sequence is split over TP ranks."""
    if p.sequence_parallel and p.tp > 1 and p.seq_length % p.tp:
        yield Violation(
            "",
            {"seq_length": p.seq_length, "tp": p.tp},
            f"seq_length {p.seq_length} is not divisible by tp={p.tp} with sequence parallelism",
            "use a seq_length that is a multiple of tp",
        )


@rule("context-parallel")
def _context_parallel(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/utils.py get_batch_on_this_cp_rank: each CP rank takes 2 chunks, so seq % (2*cp) == 0."""
    if p.cp > 1 and p.seq_length % (2 * p.cp):
        yield Violation(
            "",
            {"seq_length": p.seq_length, "cp": p.cp},
            f"seq_length {p.seq_length} is not divisible by 2*cp = {2 * p.cp}",
            "use a seq_length that is a multiple of 2*cp",
        )


@rule("virtual-pipeline")
def _virtual_pipeline(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/transformer_config.py __post_init__: VP needs PP > 1."""
    if p.vp is not None and p.vp > 1 and p.pp == 1:
        yield Violation(
            "",
            {"pp": p.pp, "vp": p.vp},
            "virtual pipeline stages need pipeline parallelism",
            "set vp to 1 (or unset it), or use pp > 1",
        )


@rule("pipeline-layout-table")
def _pipeline_layout_table(p: TrainingPlan) -> Iterator[Violation]:
    """Megatron-Bridge recipes/deepseek/deepseek_v3.py: without an explicit pipeline_layout the recipe only knows
    a layout for the (PP, VP) pairs of its table; any other pair fails when the recipe builds its config."""
    if p.pipeline_layout is None:
        pair = (p.pp, p.vp or 1)
        if pair not in p.model.recipe_pp_vp:
            yield Violation(
                "",
                {"model": p.model.name, "pp": p.pp, "vp": p.vp},
                f"the {p.model.family} recipe has no pipeline layout for (pp, vp) = {pair}",
                f"use one of {sorted(p.model.recipe_pp_vp)} or give an explicit pipeline_layout",
            )


@rule("a2a-overlap")
def _a2a_overlap(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/transformer/transformer_config.py __post_init__ (overlap_moe_expert_parallel_comm): needs EP > 1,
    VP when PP > 1, no full recompute, and MTP layers None or 1 (Bridge comm_overlap.py asserts the same)."""
    if not p.moe_a2a_overlap:
        return
    if p.ep <= 1:
        yield Violation("", {"moe_a2a_overlap": True, "ep": p.ep}, "a2a overlap needs expert parallelism",
                        "set ep > 1 or moe_a2a_overlap = false")
    if p.pp > 1 and (p.vp or 1) <= 1:
        yield Violation("", {"moe_a2a_overlap": True, "pp": p.pp, "vp": p.vp},
                        "a2a overlap with pipeline parallelism needs virtual pipeline stages",
                        "set vp >= 2 (e.g. 2 for the DSV3/Kimi layout table) or moe_a2a_overlap = false")
    if p.recompute == "full":
        yield Violation("", {"moe_a2a_overlap": True, "recompute": p.recompute},
                        "a2a overlap cannot run with full activation recompute",
                        "use recompute = \"selective\" or \"none\"")
    mtp = p.effective_mtp_layers
    if mtp not in (None, 1):
        yield Violation("", {"moe_a2a_overlap": True, "mtp_num_layers": mtp},
                        "a2a overlap supports only mtp_num_layers None or 1 ('MTP layernum only supports 1')",
                        "leave mtp_num_layers unset for a model without MTP (0 is rejected), or use 1")


@rule("dispatcher-gpu")
def _dispatcher_gpu(p: TrainingPlan) -> Iterator[Violation]:
    """Megatron-Bridge training/flex_dispatcher_backend.py apply_flex_dispatcher_backend: DeepEP only on compute
    capability 8/9 or B200/B300, HybridEP on 8/9/10; elsewhere Bridge silently falls back to all-to-all, which would
    make an A/B compare all-to-all with itself, so we reject instead."""
    if p.dispatcher == "deepep" and not p.gpu.deepep:
        yield Violation("", {"dispatcher": "deepep", "gpu": p.gpu.name},
                        f"Megatron-Bridge does not allow DeepEP on {p.gpu.name} and would fall back to alltoall",
                        "use dispatcher = \"hybridep\" on this GPU, or a GPU on the DeepEP allowlist")
    if p.dispatcher == "hybridep" and not p.gpu.hybridep:
        yield Violation("", {"dispatcher": "hybridep", "gpu": p.gpu.name},
                        f"HybridEP is not supported on {p.gpu.name}", "use dispatcher = \"deepep\" or \"alltoall\"")


@rule("deepep-network")
def _deepep_network(p: TrainingPlan) -> Iterator[Violation]:
    """UCCL-EP is DeepEP's API over EFA; NVIDIA DeepEP's internode path needs NVSHMEM over InfiniBand, so it cannot
    cross nodes on EFA, and UCCL-EP is only needed where there is EFA."""
    if p.dispatcher != "deepep":
        return
    if p.deepep_impl == "nvidia" and p.network == "efa" and p.num_nodes > 1:
        yield Violation("", {"deepep_impl": "nvidia", "network": "efa", "num_nodes": p.num_nodes},
                        "NVIDIA DeepEP cannot run internode over EFA (it needs NVSHMEM over InfiniBand)",
                        "set deepep_impl = \"uccl\" on EFA systems")
    if p.deepep_impl == "uccl" and p.network != "efa" and p.num_nodes > 1:
        yield Violation("", {"deepep_impl": "uccl", "network": p.network, "num_nodes": p.num_nodes},
                        "UCCL-EP is built for EFA; this system's network is not EFA",
                        "set deepep_impl = \"nvidia\", or run on a system whose network is EFA")


@rule("fp8-recipe-gpu")
def _fp8_recipe(p: TrainingPlan) -> Iterator[Violation]:
    """megatron/core/fp8_utils.py / Transformer Engine: MXFP8 needs Blackwell; other FP8 recipes need Hopper+."""
    if p.precision == "bf16":
        return
    recipe = p.precision.removeprefix("fp8_")
    if recipe not in p.gpu.fp8_recipes:
        yield Violation("", {"precision": p.precision, "gpu": p.gpu.name},
                        f"{p.precision} is not available on {p.gpu.name}",
                        f"use one of bf16, {', '.join('fp8_' + r if r != 'mxfp8' else r for r in sorted(p.gpu.fp8_recipes))}")
