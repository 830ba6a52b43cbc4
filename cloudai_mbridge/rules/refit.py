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
    (megatron/core/transformer/* asserts at build time), the expert grid carved out of tp*dp, and the world size of
    each mode (collocated: both sides on all ranks; non-collocated: src.world + dst.world ranks exactly)."""
    try:
        derive_layouts(from_dict(p.config), p.world_size)
    except ConfigError as exc:
        yield Violation("", _sides(p), str(exc), "change the layout or num_nodes as the message says")


@rule("refit-transport-device")
def _transport(p: RefitPlan) -> Iterator[Violation]:
    """megatron/core/resharding: the nccl and nvshmem copy services move CUDA tensors; gloo works on both."""
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
    nccl only; nvshmem has its own copy service."""
    c = p.config
    if c.get("coalesce_mib") and c["transport"] == "nvshmem":
        yield Violation("", {"coalesce_mib": c["coalesce_mib"], "transport": "nvshmem"},
                        "coalesced messages apply to the send/recv transports only",
                        "set coalesce_mib = 0 or transport = \"nccl\"")
