"""Byte plan of a refit: which source rank sends which bytes to which destination rank, without torch or GPUs.

The plan follows megatron-core's resharding planner (``megatron/core/resharding/planner.py``, read in 0.16.1 and
checked against the byte and op counts 0.17.1 reported on 2x H200, ``benchmarks/results/gpu_refit_nccl.json``):

- every destination rank asks for each parameter shard it holds; pipeline stages need no mapping, a layer's
  parameters come from whichever source stage holds that layer;
- a tensor-parallel parameter (Megatron marks it so even at TP=1) is cut on its partition dim into lcm(n_src,
  n_dst) tiles; the destination shard is served by the source TP group of the *first* data-parallel replica (the
  planner keeps the first entry of the group it picks), so all destination replicas read from source replica 0;
- a replicated parameter (norms, router, MLA down projections) comes whole from one source rank, spread round-robin
  by destination rank; it is a local copy when both sides have the same data-parallel group;
- expert weights: the source rank that owns the expert (EP), cut by expert TP like a TP parameter;
- op count per shard = lcm(n_src, n_dst) / n_dst tiles, twice that for ``linear_fc1`` (SwiGLU stride 2).

``policy="local-first"`` is the planner we would want: a shard the destination rank already holds on the source side
is copied locally, others come from source replicas round-robin by destination replica. With identical layouts it
moves no remote byte; megatron-core's policy does whenever DP > 1.

Two model shapes: :func:`payload_tensors` (what the refit payload builds: GQA stand-in, every layer MoE) and
:func:`spec_tensors` (the real architecture from catalog/models.py: MLA, first dense layers, no MTP).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..catalog import ModelSpec
from ..catalog.refit_models import GQAModelSpec
from ..payload.refit.coalesce import buckets
from ..payload.refit.config import SideLayout

POLICIES = ("megatron", "local-first")


@dataclass(frozen=True)
class Tensor:
    """One parameter. kind: "rep" (whole on every holder), "tp" (cut by TP on ``dim``), "expert" (one expert,
    cut by expert TP on ``dim``). ``layer``: index, or "first"/"last" for the embedding / output stages."""

    name: str
    numel: int
    kind: str
    layer: int | str
    dim: int = 0
    stride: int = 1
    bytes_per_param: int | None = None  # None: the model's (the payload's torch norms are fp32)


@dataclass(frozen=True)
class ModelTensors:
    name: str
    num_layers: int
    num_experts: int
    bytes_per_param: int
    dense: tuple[Tensor, ...]  # embedding, output, final norm and every layer's non-expert tensors
    expert: dict[int, tuple[Tensor, ...]]  # layer -> one expert's tensors (every expert alike)

    @property
    def params(self) -> int:
        return sum(t.numel for t in self.dense) + self.num_experts * sum(
            t.numel for ts in self.expert.values() for t in ts)

    def nbytes(self, t: Tensor, elems: int | None = None) -> int:
        return (t.numel if elems is None else elems) * (t.bytes_per_param or self.bytes_per_param)

    @property
    def bytes(self) -> int:
        return sum(self.nbytes(t) for t in self.dense) + self.num_experts * sum(
            self.nbytes(t) for ts in self.expert.values() for t in ts)


def _layer_common(i: int, h: int, norm_bytes: int | None = None) -> list[Tensor]:
    return [Tensor(f"layers.{i}.input_layernorm", h, "rep", i, bytes_per_param=norm_bytes),
            Tensor(f"layers.{i}.pre_mlp_layernorm", h, "rep", i, bytes_per_param=norm_bytes)]


def _moe(i: int, h: int, experts: int, shared: int, with_bias: bool) -> list[Tensor]:
    out = [Tensor(f"layers.{i}.router", experts * h, "rep", i)]
    if with_bias:
        out.append(Tensor(f"layers.{i}.router.expert_bias", experts, "rep", i))
    if shared:
        out += [Tensor(f"layers.{i}.shared_experts.linear_fc1", 2 * shared * h, "tp", i, 0, 2),
                Tensor(f"layers.{i}.shared_experts.linear_fc2", h * shared, "tp", i, 1)]
    return out


def _expert(i: int, h: int, f: int) -> tuple[Tensor, ...]:
    return (Tensor(f"layers.{i}.experts.linear_fc1", 2 * f * h, "expert", i, 0, 2),
            Tensor(f"layers.{i}.experts.linear_fc2", h * f, "expert", i, 1))


def _ends(h: int, vocab: int, norm_bytes: int | None = None) -> list[Tensor]:
    return [Tensor("embedding", vocab * h, "tp", "first"),
            Tensor("final_layernorm", h, "rep", "last", bytes_per_param=norm_bytes),
            Tensor("output_layer", vocab * h, "tp", "last")]


def payload_tensors(model: dict, padded_vocab: int, bytes_per_param: int = 2) -> ModelTensors:
    """The refit payload's model (payload/refit/models.py): GQA attention, every layer MoE, untied embeddings; its
    RMSNorms are torch norms that keep fp32 weights (the 2x H200 run's byte counts say so)."""
    h, heads = model["hidden_size"], model["num_attention_heads"]
    groups = model.get("num_query_groups") or heads
    hd = h // heads
    experts, f = model["num_experts"], model["moe_ffn_hidden_size"]
    shared = model.get("moe_shared_expert_intermediate_size") or 0
    dense = _ends(h, padded_vocab, 4)
    expert = {}
    for i in range(model["num_layers"]):
        dense += [*_layer_common(i, h, 4),
                  Tensor(f"layers.{i}.linear_qkv", (heads + 2 * groups) * hd * h, "tp", i, 0),
                  Tensor(f"layers.{i}.linear_proj", h * heads * hd, "tp", i, 1),
                  *_moe(i, h, experts, shared, False)]
        expert[i] = _expert(i, h, f)
    return ModelTensors(model["name"], model["num_layers"], experts, bytes_per_param, tuple(dense), expert)


def spec_tensors(spec: ModelSpec, bytes_per_param: int = 2) -> ModelTensors:
    """The real model from the catalog: MLA attention, the first ``first_k_dense`` layers dense, the rest MoE
    (router with expert bias, one shared expert), untied embeddings. MTP layers are left out (not refitted into
    the main model); the vocabulary is unpadded."""
    h, heads = spec.hidden_size, spec.num_attention_heads
    qk = spec.qk_head_dim + spec.qk_pos_emb_head_dim
    dense = _ends(h, spec.vocab_size)
    expert = {}
    for i in range(spec.num_layers):
        attn = []
        if spec.q_lora_rank:
            attn += [Tensor(f"layers.{i}.linear_q_down_proj", spec.q_lora_rank * h, "rep", i),
                     Tensor(f"layers.{i}.q_layernorm", spec.q_lora_rank, "rep", i),
                     Tensor(f"layers.{i}.linear_q_up_proj", heads * qk * spec.q_lora_rank, "tp", i, 0)]
        else:
            attn.append(Tensor(f"layers.{i}.linear_q_proj", heads * qk * h, "tp", i, 0))
        attn += [Tensor(f"layers.{i}.linear_kv_down_proj", (spec.kv_lora_rank + spec.qk_pos_emb_head_dim) * h,
                        "rep", i),
                 Tensor(f"layers.{i}.kv_layernorm", spec.kv_lora_rank, "rep", i),
                 Tensor(f"layers.{i}.linear_kv_up_proj",
                        heads * (spec.qk_head_dim + spec.v_head_dim) * spec.kv_lora_rank, "tp", i, 0),
                 Tensor(f"layers.{i}.linear_proj", h * heads * spec.v_head_dim, "tp", i, 1)]
        dense += _layer_common(i, h) + attn
        if i < spec.first_k_dense:
            dense += [Tensor(f"layers.{i}.mlp.linear_fc1", 2 * spec.ffn_hidden_size * h, "tp", i, 0, 2),
                      Tensor(f"layers.{i}.mlp.linear_fc2", h * spec.ffn_hidden_size, "tp", i, 1)]
        else:
            dense += _moe(i, h, spec.num_experts, spec.shared_expert_intermediate_size, True)
            expert[i] = _expert(i, h, spec.moe_ffn_hidden_size)
    return ModelTensors(spec.name, spec.num_layers, spec.num_experts, bytes_per_param, tuple(dense), expert)


def gqa_tensors(spec: GQAModelSpec, bytes_per_param: int = 2, keep_bytes: int | None = None) -> ModelTensors:
    """A grouped-query-attention model of catalog/refit_models.py (Qwen3): fused QKV and QK norm, every layer MoE
    (router, no shared expert, no expert bias) or every layer dense; a tied output layer is not sent (it is the
    embedding, as NeMo-RL's NCCL-Xfer skips lm_head when tie_word_embeddings is set). ``keep_bytes``: bytes per
    parameter of the embedding, output layer and norms when the linear weights travel in another width (FP8: 1)."""
    h, heads, groups, hd = spec.hidden_size, spec.num_attention_heads, spec.num_query_groups, spec.head_dim
    dense = [t for t in _ends(h, spec.vocab_size) if not (spec.tie_word_embeddings and t.name == "output_layer")]
    dense = [Tensor(t.name, t.numel, t.kind, t.layer, t.dim, t.stride, keep_bytes) for t in dense]
    expert = {}
    for i in range(spec.num_layers):
        dense += [*_layer_common(i, h, keep_bytes),
                  Tensor(f"layers.{i}.linear_qkv", (heads + 2 * groups) * hd * h, "tp", i, 0),
                  Tensor(f"layers.{i}.linear_proj", h * heads * hd, "tp", i, 1)]
        if spec.qk_norm:
            dense += [Tensor(f"layers.{i}.q_layernorm", hd, "rep", i, bytes_per_param=keep_bytes),
                      Tensor(f"layers.{i}.k_layernorm", hd, "rep", i, bytes_per_param=keep_bytes)]
        if spec.num_experts:
            dense += _moe(i, h, spec.num_experts, 0, False)
            expert[i] = _expert(i, h, spec.moe_ffn_hidden_size)
        else:
            dense += [Tensor(f"layers.{i}.mlp.linear_fc1", 2 * spec.ffn_hidden_size * h, "tp", i, 0, 2),
                      Tensor(f"layers.{i}.mlp.linear_fc2", h * spec.ffn_hidden_size, "tp", i, 1)]
    return ModelTensors(spec.name, spec.num_layers, spec.num_experts or 1, bytes_per_param, tuple(dense), expert)


# ----------------------------------------------------------------------------------------------------------------
# Layouts
# ----------------------------------------------------------------------------------------------------------------


def side(tp: int, pp: int, ep: int, world: int, etp: int | None = None, first_rank: int = 0,
         name: str = "side") -> SideLayout:
    """A SideLayout (payload/refit/config.py) from sizes: dp = world / (tp*pp), EP carved out of tp*dp."""
    etp = tp if etp is None else etp
    if world % (tp * pp) or (world // pp) % (etp * ep):
        need = pp * math.lcm(tp, etp * ep)
        raise ValueError(f"{name}: world {world} does not hold tp={tp} pp={pp} (and etp*ep={etp * ep} inside "
                         f"tp*dp); choose a world that is a multiple of pp*lcm(tp, etp*ep)={need}")
    return SideLayout(name, tp, pp, ep, etp, world // (tp * pp), first_rank)


def stage_of_layer(num_layers: int, pp: int) -> list[int]:
    """Layers split as evenly as possible, the first ``num_layers % pp`` stages one layer more (an assumption for
    uneven splits: Megatron-Bridge's DeepSeek-V3 PP16 layout differs in detail, not in bytes per layer)."""
    base, extra = divmod(num_layers, pp)
    out: list[int] = []
    for s in range(pp):
        out += [s] * (base + (1 if s < extra else 0))
    return out


def _dense_rank(s: SideLayout, tp_r: int, dp_r: int, pp_r: int) -> int:
    # HyperCommGrid [tp, cp, dp, pp]: tp varies fastest (payload/refit/groups.py)
    return s.rank_offset + tp_r + s.tp * (dp_r + s.dp * pp_r)


def _expert_rank(s: SideLayout, etp_r: int, ep_r: int, edp_r: int, pp_r: int) -> int:
    return s.rank_offset + etp_r + s.etp * (ep_r + s.ep * (edp_r + s.edp * pp_r))


def _dense_coords(s: SideLayout, rank: int) -> tuple[int, int, int]:
    r = rank - s.rank_offset
    return r % s.tp, (r // s.tp) % s.dp, r // (s.tp * s.dp)


def _expert_coords(s: SideLayout, rank: int) -> tuple[int, int, int, int]:
    r = rank - s.rank_offset
    return r % s.etp, (r // s.etp) % s.ep, (r // (s.etp * s.ep)) % s.edp, r // (s.etp * s.ep * s.edp)


def _tiles(numel: int, n_src: int, n_dst: int, j: int) -> Iterator[tuple[int, int, int]]:
    """(source piece, elements, tiles) of destination piece ``j``: the overlap of [j/n_dst, (j+1)/n_dst) with each
    source piece, in lcm(n_src, n_dst) tiles (megatron-core plans one slice per tile)."""
    tiles = math.lcm(n_src, n_dst)
    per_dst, per_src = tiles // n_dst, tiles // n_src
    counts: dict[int, int] = {}
    for t in range(j * per_dst, (j + 1) * per_dst):
        counts[t // per_src] = counts.get(t // per_src, 0) + 1
    for i, c in counts.items():
        yield i, numel * c // tiles, c


# ----------------------------------------------------------------------------------------------------------------
# The plan
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class RankPlan:
    rank: int
    recv_local: int = 0  # bytes (copied on the GPU)
    recv_remote: int = 0
    recv_inter_node: int = 0  # part of recv_remote from another node
    send_remote: int = 0
    send_inter_node: int = 0
    ops: int = 0  # planned slices received (megatron-core posts one send/recv each)
    peers: set[int] = field(default_factory=set)  # source ranks of remote bytes
    per_peer: dict[int, list[int]] = field(default_factory=dict)  # remote slice sizes per source, in plan order

    @property
    def recv(self) -> int:
        return self.recv_local + self.recv_remote


@dataclass
class BytePlan:
    model: ModelTensors
    src: SideLayout
    dst: SideLayout
    gpus_per_node: int
    policy: str
    ranks: dict[int, RankPlan]
    # param bytes delivered per tensor name (summed over destination ranks), for the conservation check
    delivered: dict[str, int]

    @property
    def world(self) -> int:
        return max(self.src.rank_offset + self.src.world, self.dst.rank_offset + self.dst.world)

    def worst(self, attr: str) -> int:
        return max(getattr(r, attr) for r in self.ranks.values())

    def total(self, attr: str) -> int:
        return sum(getattr(r, attr) for r in self.ranks.values())

    def messages(self, coalesce_mib: int) -> int:
        """Most remote messages one rank receives: one per slice (coalesce_mib=0, megatron-core's service) or the
        coalescing service's buckets (payload/refit/coalesce.py ``buckets``, the same function the GPU ran)."""
        if coalesce_mib <= 0:
            return max(sum(len(v) for v in r.per_peer.values()) for r in self.ranks.values())
        cap = coalesce_mib << 20
        return max(sum(len(buckets(v, cap)) for v in r.per_peer.values()) for r in self.ranks.values())


def build_plan(model: ModelTensors, src: SideLayout, dst: SideLayout, gpus_per_node: int = 8,
               policy: str = "megatron") -> BytePlan:
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r}: must be one of {list(POLICIES)}")
    if model.num_experts % src.ep or model.num_experts % dst.ep:
        raise ValueError(f"{model.name}: {model.num_experts} experts do not split over ep={src.ep} -> {dst.ep}")
    world = max(src.rank_offset + src.world, dst.rank_offset + dst.world)
    ranks = {r: RankPlan(r) for r in range(world)}
    delivered: dict[str, int] = {}
    src_stage, dst_stage = stage_of_layer(model.num_layers, src.pp), stage_of_layer(model.num_layers, dst.pp)

    def stage(stages: list[int], s: SideLayout, layer: int | str) -> int:
        return 0 if layer == "first" else s.pp - 1 if layer == "last" else stages[layer]

    def add(d: int, src_rank: int, elems: int, t: Tensor, ops: int) -> None:
        nbytes = model.nbytes(t, elems)
        delivered[t.name] = delivered.get(t.name, 0) + nbytes
        rp = ranks[d]
        rp.ops += ops
        if src_rank == d:
            rp.recv_local += nbytes
            return
        inter = src_rank // gpus_per_node != d // gpus_per_node
        rp.recv_remote += nbytes
        rp.peers.add(src_rank)
        rp.per_peer.setdefault(src_rank, []).extend([nbytes // ops] * ops)
        sp = ranks[src_rank]
        sp.send_remote += nbytes
        if inter:
            rp.recv_inter_node += nbytes
            sp.send_inter_node += nbytes

    for d in dst.ranks:
        tp_r, dp_r, pp_r = _dense_coords(dst, d)
        etp_r, ep_r, edp_r, _ = _expert_coords(dst, d)
        for t in model.dense:
            if stage(dst_stage, dst, t.layer) != pp_r:
                continue
            s_pp = stage(src_stage, src, t.layer)
            if t.kind == "tp":
                for i, elems, tiles in _tiles(t.numel, src.tp, dst.tp, tp_r):
                    replica = _sharded_replica(policy, d, dp_r,
                                               lambda r, i=i, s_pp=s_pp: _dense_rank(src, i, r, s_pp), src.dp)
                    add(d, _dense_rank(src, i, replica, s_pp), elems, t, t.stride * tiles)
            else:
                add(d, _replicated_source(policy, src, dst, d, s_pp), t.numel, t, 1)
        per_ep = model.num_experts // dst.ep
        for layer, tensors in model.expert.items():
            if dst_stage[layer] != pp_r:
                continue
            s_pp = src_stage[layer]
            # experts of this rank that one source EP rank holds move alike: one entry per source EP rank, n times
            owners: dict[int, int] = {}
            for e in range(ep_r * per_ep, (ep_r + 1) * per_ep):
                s_ep = e // (model.num_experts // src.ep)
                owners[s_ep] = owners.get(s_ep, 0) + 1
            for s_ep, n in owners.items():
                for t in tensors:
                    for i, elems, tiles in _tiles(t.numel, src.etp, dst.etp, etp_r):
                        def rank_of(r, i=i, s_ep=s_ep, s_pp=s_pp):
                            return _expert_rank(src, i, s_ep, r, s_pp)
                        replica = _sharded_replica(policy, d, edp_r, rank_of, src.edp)
                        add(d, _expert_rank(src, i, s_ep, replica, s_pp), n * elems, t, n * t.stride * tiles)
    return BytePlan(model, src, dst, gpus_per_node, policy, ranks, delivered)


def _sharded_replica(policy: str, d: int, dst_replica: int, rank_of, replicas: int) -> int:
    """Which source data-parallel replica serves a sharded piece."""
    if policy == "megatron":
        return 0
    for r in range(replicas):  # local-first: this rank holds the piece itself
        if rank_of(r) == d:
            return r
    return dst_replica % replicas


def _replicated_source(policy: str, src: SideLayout, dst: SideLayout, d: int, s_pp: int) -> int:
    """megatron-core: source TP position d % tp, then data-parallel member d % dp; a local copy when the source
    and destination DP groups are the same ranks. local-first: d itself when it holds the stage."""
    tp_r, _, pp_r = _dense_coords(dst, d)
    if policy == "local-first" and d in src.ranks and _dense_coords(src, d)[2] == s_pp:
        return d
    t = d % src.tp
    src_group = [_dense_rank(src, t, j, s_pp) for j in range(src.dp)]
    dst_group = [_dense_rank(dst, tp_r, j, pp_r) for j in range(dst.dp)]
    if src_group == dst_group:
        return d
    return src_group[d % src.dp]


def replica_bytes(plan: BytePlan) -> Iterable[tuple[int, int]]:
    """(destination replica, bytes it received): a replica is one dense data-parallel index of the destination."""
    out: dict[int, int] = {}
    for d in plan.dst.ranks:
        out.setdefault(_dense_coords(plan.dst, d)[1], 0)
        out[_dense_coords(plan.dst, d)[1]] += plan.ranks[d].recv
    return sorted(out.items())


# ----------------------------------------------------------------------------------------------------------------
# Seconds
# ----------------------------------------------------------------------------------------------------------------

# Measured on 2x H200 (NV18), benchmarks/results/gpu_refit_nccl.json and gpu_refit_coalesce.json, GB = 1e9 B:
MEASURED_REFIT_GBPS = 57.68  # remote bytes per GPU per s, megatron-core NCCL service, Kimi-K2-shaped tp2 -> ep2
MEASURED_COALESCED_GBPS = 70.05  # the same with payload/refit/coalesce.py, 1024 MiB messages
MEASURED_CEILING_GBPS = 359.29  # NCCL exchange, 4 GiB in one op, same run as MEASURED_REFIT_GBPS
# Measured on 4x H200 (NV18), benchmarks/results/refit_4gpu/h200/w4_gpu_refit_nccl.json, Kimi-K2-shaped tp4 -> ep4:
MEASURED_REPLAY_GBPS = 248.70  # executor "replay" (payload/refit/replay.py), coalesce_mib 1024, overlapped
MEASURED_REPLAY_CEILING_GBPS = 358.29  # NCCL exchange, 4 GiB in one op, same run as MEASURED_REPLAY_GBPS
# Measured on 4x H200 (NV18), benchmarks/results/refit_4gpu/h200b/c3_pairwise_1024/gpu_refit_nccl.json, tp4 -> ep4:
MEASURED_PAIRWISE_GBPS = 267.44  # executor "replay", coalesce_mib 1024, coalesce_schedule "pairwise", overlapped
MEASURED_PAIRWISE_CEILING_GBPS = 356.41  # NCCL exchange, 4 GiB in one op, same run as MEASURED_PAIRWISE_GBPS
# Assumed, not measured here:
ASSUMED_NIC_GBPS = 50.0  # 400 Gb/s per GPU between nodes (one 400G NIC per H100), line rate
ASSUMED_COPY_GBPS = 1000.0  # device-to-device copy of local slices (H100 HBM3, read + write)


@dataclass(frozen=True)
class Bandwidth:
    name: str
    nvlink_gbps: float  # remote bytes within a node, per GPU
    nic_gbps: float  # remote bytes between nodes, per GPU
    copy_gbps: float = ASSUMED_COPY_GBPS
    measured_on: str = "2x H200"  # where nvlink_gbps was measured


def bandwidths() -> list[Bandwidth]:
    """The measured refit rate inside a node, and between nodes the same fraction of the assumed NIC line rate."""
    return [
        Bandwidth("measured", MEASURED_REFIT_GBPS, ASSUMED_NIC_GBPS * MEASURED_REFIT_GBPS / MEASURED_CEILING_GBPS),
        Bandwidth("coalesced", MEASURED_COALESCED_GBPS,
                  ASSUMED_NIC_GBPS * MEASURED_COALESCED_GBPS / MEASURED_CEILING_GBPS),
        Bandwidth("replay", MEASURED_REPLAY_GBPS,
                  ASSUMED_NIC_GBPS * MEASURED_REPLAY_GBPS / MEASURED_REPLAY_CEILING_GBPS, measured_on="4x H200"),
        Bandwidth("replay-pairwise", MEASURED_PAIRWISE_GBPS,
                  ASSUMED_NIC_GBPS * MEASURED_PAIRWISE_GBPS / MEASURED_PAIRWISE_CEILING_GBPS, measured_on="4x H200"),
        Bandwidth("line-rate", MEASURED_CEILING_GBPS, ASSUMED_NIC_GBPS),
    ]


def rank_seconds(r: RankPlan, bw: Bandwidth) -> float:
    """One GPU: intra-node remote bytes (the larger of sent and received) at nvlink_gbps, then inter-node bytes at
    nic_gbps, then local copies at copy_gbps, one after the other (no overlap assumed; no per-op latency term)."""
    intra = max(r.recv_remote - r.recv_inter_node, r.send_remote - r.send_inter_node)
    inter = max(r.recv_inter_node, r.send_inter_node)
    return (intra / bw.nvlink_gbps + inter / bw.nic_gbps + r.recv_local / bw.copy_gbps) / 1e9


def predict_seconds(plan: BytePlan, bw: Bandwidth) -> float:
    """The slowest GPU's seconds: every rank finishes when its own bytes are through."""
    return max(rank_seconds(r, bw) for r in plan.ranks.values())


def payload_plan(config: dict, world_size: int, gpus_per_node: int) -> BytePlan:
    """The byte plan of a refit payload config (what `preflight` and the payload see)."""
    from ..payload.refit.config import derive_layouts, from_dict, padded_vocab_size

    cfg = from_dict(config)
    src, dst = derive_layouts(cfg, world_size)
    model = payload_tensors(config["model"], padded_vocab_size(cfg), 4 if cfg.dtype == "fp32" else 2)
    return build_plan(model, src, dst, gpus_per_node)


@dataclass(frozen=True)
class RefitPrediction:
    """Predicted seconds of one refit and the byte plan they rest on (GB = 1e9 B)."""

    seconds: float
    recv_gb: float  # most bytes one GPU receives, local copies included
    remote_gb: float  # most remote bytes one GPU receives
    rate: Bandwidth
    # executor "both": the job also times Megatron-Core's own copy service (one message per planned slice), priced
    # at the uncoalesced measured rate; ``seconds`` is ours (the refit page's row time is ours too)
    megatron_seconds: float | None = None
    megatron_rate: Bandwidth | None = None

    @property
    def basis(self) -> str:
        r = self.rate
        text = (f"{r.name}: {r.nvlink_gbps:.2f} GB/s/GPU in a node (measured, {r.measured_on}), "
                f"{r.nic_gbps:.2f} GB/s/GPU between nodes (assumed)")
        if self.megatron_rate is not None:
            m = self.megatron_rate
            text += (f" (ours; executor \"both\" also times Megatron-Core's own service, priced at {m.name}: "
                     f"{m.nvlink_gbps:.2f} GB/s/GPU in a node, {m.nic_gbps:.2f} between nodes)")
        return text


_PLANS: dict[tuple, BytePlan] = {}
_PREDICTIONS: dict[tuple, RefitPrediction] = {}


def _rate_name(config: dict) -> str:
    """Which measured rate prices a refit payload config: its copy service, executor and schedule. The pairwise
    schedule was measured with the replay executor only: with executor "megatron" it is priced as "coalesced".
    Executor "both" is priced as ours (replay); Megatron-Core's service of the same job is priced apart
    (:func:`predict_payload`)."""
    if (config.get("coalesce_mib") or 0) <= 0:
        return "measured"
    if config.get("executor") not in ("replay", "both"):
        return "coalesced"
    return "replay-pairwise" if config.get("coalesce_schedule") == "pairwise" else "replay"


def predict_payload(config: dict, world_size: int, gpus_per_node: int) -> RefitPrediction:
    """Seconds of a refit payload config on ``world_size`` GPUs, ``gpus_per_node`` a node, at the measured rate
    (``coalesce_mib`` > 0: the coalescing service's measured rate; ``executor`` "replay" as well: the replay
    executor's, with ``coalesce_schedule`` "pairwise" its pairwise rate). Cached per model, layout pair and world: a
    Kimi-K2 plan takes seconds to build and every point of a sweep that changes something else shares it."""
    layout = (json.dumps({k: config.get(k) for k in ("model", "src", "dst", "mode", "dtype")}, sort_keys=True),
              world_size, gpus_per_node)
    name, both = _rate_name(config), config.get("executor") == "both"
    key = (*layout, name, both)
    if key not in _PREDICTIONS:
        if layout not in _PLANS:  # one byte plan per layout pair, whichever service and executor price it
            _PLANS[layout] = payload_plan(config, world_size, gpus_per_node)
        plan = _PLANS[layout]
        rates = {b.name: b for b in bandwidths()}
        rate = rates[name]
        theirs = rates["measured"] if both else None
        _PREDICTIONS[key] = RefitPrediction(predict_seconds(plan, rate), plan.worst("recv") / 1e9,
                                            plan.worst("recv_remote") / 1e9, rate,
                                            None if theirs is None else predict_seconds(plan, theirs), theirs)
    return _PREDICTIONS[key]
