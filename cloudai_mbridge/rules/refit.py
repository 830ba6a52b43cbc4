"""Rules for the refit workload. The layout checks are the payload's own (payload/refit/config.py), run here at
dry-run time so a point the payload would refuse never reaches the queue."""

from __future__ import annotations

from collections.abc import Iterator

from ..payload.refit.config import ConfigError, derive_layouts, from_dict
from ..plan.refit import RefitPlan
from .base import RuleSet, Violation

REFIT_RULES: RuleSet[RefitPlan] = RuleSet("refit")
rule = REFIT_RULES.rule


def _sides(p: RefitPlan) -> dict[str, object]:
    c = p.config
    return {"src": c["src"], "dst": c["dst"], "mode": c["mode"], "world_size": p.world_size}


@rule("refit-layout")
def _layout(p: RefitPlan) -> Iterator[Violation]:
    """payload/refit/config.py derive_layouts: divisibility of heads/ffn/experts/layers by each side's tp/etp/ep/pp
    (megatron/core/transformer/* asserts at build time), the expert grid carved out of tp*dp (megatron/core/inference/
    shards.py asserts it), and the world size of each mode (collocated: both sides on all ranks; non-collocated: at
    least src.world + dst.world ranks, each side tp*pp*ep unless `world` is given, the rest idle, as Megatron-LM's
    refit benchmark and megatron-core's refit run them). Unset sizes are upstream's (config.resolve_sides).
    tests/rules/test_refit_differential.py holds these verdicts against megatron-core's own planner."""
    try:
        derive_layouts(from_dict(p.config), p.world_size)
    except ConfigError as exc:
        yield Violation("", _sides(p), str(exc), "change the layout or num_nodes as the message says")


@rule("refit-transport-device")
def _transport(p: RefitPlan) -> Iterator[Violation]:
    """megatron/core/resharding: the nccl, nvshmem and nixl copy services move CUDA tensors; gloo works on both."""
    c = p.config
    if c["transport"] != "gloo" and c["device"] != "cuda":
        yield Violation("", {"transport": c["transport"], "device": c["device"]},
                        f"transport {c['transport']} needs GPUs", "use transport = \"gloo\" or device = \"cuda\"")
    if c["device"] == "cuda" and not p.system_has_gpus:
        yield Violation("", {"device": "cuda", "gpus_per_node": None},
                        "the system declares no GPUs (gpus_per_node is unset)",
                        "set gpus_per_node in the system file, or device = \"cpu\" with transport = \"gloo\"")


@rule("refit-coalesce-transport")
def _coalesce(p: RefitPlan) -> Iterator[Violation]:
    """payload/refit/coalesce.py packs slices into send/recv messages (torch.distributed isend/irecv): gloo and
    nccl only; nvshmem and nixl have their own copy services (executor "both" times that service next to ours,
    which then runs over the process group's backend, nccl on GPUs)."""
    c = p.config
    if c.get("coalesce_mib") and c["transport"] in ("nvshmem", "nixl") and c.get("executor") != "both":
        yield Violation("", {"coalesce_mib": c["coalesce_mib"], "transport": c["transport"]},
                        "coalesced messages apply to the send/recv transports only",
                        "set coalesce_mib = 0 or transport = \"nccl\"")


@rule("refit-executor-coalesce")
def _executor(p: RefitPlan) -> Iterator[Violation]:
    """payload/refit/replay.py: executor "replay" hands megatron-core's cached plan to the coalescing copy service
    (payload/refit/coalesce.py), which runs only with coalesce_mib > 0 (payload/refit/config.py refuses it too)."""
    c = p.config
    if c.get("executor", "megatron") in ("replay", "both") and not c.get("coalesce_mib"):
        yield Violation("", {"executor": c["executor"], "coalesce_mib": c.get("coalesce_mib", 0)},
                        f"executor {c['executor']} replays the plan through the coalescing copy service",
                        "set coalesce_mib > 0 or executor = \"megatron\"")


@rule("refit-schedule-coalesce")
def _schedule(p: RefitPlan) -> Iterator[Violation]:
    """payload/refit/coalesce.py exchange_units: coalesce_schedule orders the coalescing copy service's messages, so
    "pairwise" needs coalesce_mib > 0 (payload/refit/config.py refuses it too)."""
    c = p.config
    if c.get("coalesce_schedule", "rounds") != "rounds" and not c.get("coalesce_mib"):
        yield Violation("", {"coalesce_schedule": c["coalesce_schedule"], "coalesce_mib": c.get("coalesce_mib", 0)},
                        "the schedule orders the coalescing copy service's messages",
                        "set coalesce_mib > 0 or coalesce_schedule = \"rounds\"")


@rule("refit-edge-coalesce")
def _edge(p: RefitPlan) -> Iterator[Violation]:
    """payload/refit/coalesce.py buckets: coalesce_edge_mib cuts the first and last message per peer smaller than
    coalesce_mib, so it needs 0 < coalesce_edge_mib < coalesce_mib (payload/refit/config.py refuses it too)."""
    c = p.config
    edge, mib = c.get("coalesce_edge_mib", 0), c.get("coalesce_mib", 0)
    if edge and not 0 < edge < mib:
        yield Violation("", {"coalesce_edge_mib": edge, "coalesce_mib": mib},
                        "the first and last messages per peer are cut smaller than the others (coalesce_mib)",
                        "set coalesce_edge_mib below coalesce_mib (with coalesce_mib > 0), or to 0")


@rule("refit-model-size")
def _model_size(p: RefitPlan) -> Iterator[Violation]:
    """catalog/models.py: num_layers is there to run fewer layers than the model has (refit moves every layer
    alike), never more; seq_length at most the model's max_position_embeddings (its RoPE range: Megatron builds the
    rotary tables for it, and Bridge's recipes never exceed it)."""
    from ..catalog import get_model

    m = p.config["model"]
    spec = get_model(m["name"])
    if m["num_layers"] > spec.num_layers:
        yield Violation("", {"num_layers": m["num_layers"]},
                        f"{spec.name} has {spec.num_layers} layers; num_layers only runs fewer",
                        f"use num_layers from 1 to {spec.num_layers}, or remove it for the whole model")
    if m["seq_length"] > spec.max_position_embeddings:
        yield Violation("", {"seq_length": m["seq_length"]},
                        f"{spec.name} takes sequences of at most {spec.max_position_embeddings:,} tokens "
                        "(max_position_embeddings)",
                        f"use seq_length <= {spec.max_position_embeddings}")
