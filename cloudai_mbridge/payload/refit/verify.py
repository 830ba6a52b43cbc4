"""Verification that does not trust the refit planner.

Every parameter gets a canonical global name and a shard geometry derived from the model itself (Megatron's layer
numbers, the EP rank of the expert groups, the TP attributes Megatron stamps on its weights) -- never from the
planner's metadata. Then:

1. fill: each source shard is set from a deterministic function of (crc32(global name), version, global element
   index), so any rank can compute the expected value of any element of any layout without materialising full
   tensors. The version moves before every refit (warm-up and timed), as an optimizer step moves the weights between
   two RL refits;
2. poison: every destination parameter is set to NaN before every refit (warm-up and timed);
3. after every timed refit: no destination element may still be NaN, and (verify on) every destination shard equals
   the version just sent ("each-refit": a transport that hands over an earlier refit's weights fails at that refit);
4. after the last refit, two checks, both bit-exact (integer views, so -0.0 and NaN payloads count):
   a) shard-ref: every destination shard (and every source shard, which refit must not touch) equals the
      reference function at its global coordinates -- on every rank, scales to any model;
   b) gather: for each global name, rank 0 gathers all source and all destination shards, un-shards both (TP with
      partition stride, EP by global expert index, PP by global layer number), checks full coverage and DP replica
      agreement, and compares the two full tensors with each other and with the reference. Runs while one full
      model copy is at most `verify_gather_max_bytes`.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

_LOCAL_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_PRIME = 2147483647
# Rows of a shard whose reference values are computed at once (bounds the int64 index tensor on large weights).
_CHUNK_ELEMENTS = 1 << 24


@dataclass
class Shard:
    """One parameter as held by one rank, placed in its full (unsharded) tensor."""

    side: str
    name: str
    local_name: str
    full_shape: tuple[int, ...]
    dim: int | None  # partition dim, None when replicated
    tp_rank: int
    tp_size: int
    stride: int
    param: torch.nn.Parameter | None = field(default=None, repr=False, compare=False)

    def geometry(self) -> dict:
        return {
            "side": self.side, "name": self.name, "local_name": self.local_name, "full_shape": list(self.full_shape),
            "dim": self.dim, "tp_rank": self.tp_rank, "tp_size": self.tp_size, "stride": self.stride,
        }


def _layer_prefix_map(model: torch.nn.Module) -> dict[str, str]:
    from megatron.core.transformer.transformer_layer import TransformerLayer

    prefixes = {}
    for module_name, module in model.named_modules():
        if isinstance(module, TransformerLayer):
            parts = module_name.split(".")
            parts[-1] = str(module.layer_number - 1)
            prefixes[module_name] = ".".join(parts)
    return prefixes


def _global_name(local_name: str, prefixes: dict[str, str], expert_offset: int) -> str:
    parts = local_name.split(".")
    for i in range(len(parts), 0, -1):
        mapped = prefixes.get(".".join(parts[:i]))
        if mapped is not None:
            local_name = ".".join([mapped, *parts[i:]])
            break
    match = _LOCAL_EXPERT.search(local_name)
    if match is None:
        return local_name
    return _LOCAL_EXPERT.sub(f".local_experts.{expert_offset + int(match.group(1))}.", local_name, count=1)


def describe(model: torch.nn.Module, side: str, pg_collection, num_experts: int) -> list[Shard]:
    """Shards of `model` on this rank, with global names and geometry."""
    prefixes = _layer_prefix_map(model)
    ep_size = dist.get_world_size(pg_collection.ep)
    expert_offset = dist.get_rank(pg_collection.ep) * (num_experts // ep_size)
    shards = []
    for local_name, param in model.named_parameters():
        name = _global_name(local_name, prefixes, expert_offset)
        shape = tuple(param.shape)
        if getattr(param, "tensor_model_parallel", False):
            group = pg_collection.expt_tp if _LOCAL_EXPERT.search(local_name) else pg_collection.tp
            dim, size = int(param.partition_dim), dist.get_world_size(group)
            full = tuple(n * size if d == dim else n for d, n in enumerate(shape))
            shards.append(Shard(side, name, local_name, full, dim, dist.get_rank(group), size,
                                int(getattr(param, "partition_stride", 1)), param))
        else:
            shards.append(Shard(side, name, local_name, shape, None, 0, 1, 1, param))
    return shards


def _global_positions(shard: Shard, local_len: int, device) -> torch.Tensor:
    """Global indices along the partition dim of this shard's local rows (Megatron's strided split)."""
    local = torch.arange(local_len, device=device, dtype=torch.int64)
    per_stride = local_len // shard.stride
    piece = (local // per_stride) * shard.tp_size + shard.tp_rank
    return piece * per_stride + local % per_stride


def _hash_values(seed: int, flat_index: torch.Tensor) -> torch.Tensor:
    """Deterministic values k/256, k in [-256, 256): exact in bf16, fp16 and fp32."""
    h = (flat_index % _PRIME) * 1103515245 % _PRIME
    h = (h + seed) % _PRIME
    h = (h * 48271 + 12345) % _PRIME
    h = h ^ (h >> 11)
    h = (h * 69621) % _PRIME
    return ((h % 512) - 256).to(torch.float32) / 256.0


def reference(shard: Shard, local_shape: tuple[int, ...], dtype: torch.dtype, device,
              version: int = 0) -> torch.Tensor:
    """Expected contents of this shard: the reference function at each element's global coordinates, for the
    source weights' ``version`` (the payload moves the source to a new version before every refit, as an optimizer
    step would, so that a destination holding an earlier refit's weights is caught: payload/refit/__main__.py)."""
    seed = (zlib.crc32(shard.name.encode()) + version * 1_000_003) % _PRIME
    out = torch.empty(local_shape, dtype=dtype, device=device)
    if not local_shape:
        out.fill_(_hash_values(seed, torch.zeros((), dtype=torch.int64)).item())
        return out
    full_strides = [1] * len(local_shape)
    for d in range(len(local_shape) - 2, -1, -1):
        full_strides[d] = full_strides[d + 1] * shard.full_shape[d + 1]
    coords = []
    for d, n in enumerate(local_shape):
        index = _global_positions(shard, n, device) if d == shard.dim else torch.arange(n, device=device)
        view = [1] * len(local_shape)
        view[d] = n
        coords.append(index.view(view) * full_strides[d])
    row_elements = max(1, out[0].numel()) if out.dim() > 0 else 1
    rows = max(1, _CHUNK_ELEMENTS // row_elements)
    for start in range(0, local_shape[0], rows):
        stop = min(local_shape[0], start + rows)
        flat = coords[0][start:stop]
        for c in coords[1:]:
            flat = flat + c
        out[start:stop] = _hash_values(seed, flat).to(dtype)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_BITS[t.element_size()])


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


@torch.no_grad()
def fill_reference(shards: list[Shard], version: int = 0) -> None:
    for s in shards:
        s.param.data.copy_(reference(s, tuple(s.param.shape), s.param.dtype, s.param.device, version))


@torch.no_grad()
def poison(shards: list[Shard]) -> None:
    for s in shards:
        s.param.data.fill_(float("nan"))


def any_nan(shards: list[Shard]) -> bool:
    return any(bool(torch.isnan(s.param.data).any()) for s in shards)


@torch.no_grad()
def corrupt_one(shards: list[Shard]) -> str:
    """Testing hook: flip one destination element (what a silently wrong refit would look like)."""
    s = shards[-1]
    s.param.data.view(-1)[0] += 1.0
    return s.name


def shard_mismatches(shards: list[Shard], version: int = 0) -> list[str]:
    """Names of shards on this rank that differ from the reference of ``version`` (bit-exact)."""
    return [s.name for s in shards if not bit_equal(s.param.data, reference(s, tuple(s.param.shape), s.param.dtype,
                                                                             s.param.device, version))]


def model_bytes(local: list[Shard]) -> int:
    """Bytes of one full model copy (every global source parameter once), agreed by all ranks."""
    mine = {s.name: s.param.element_size() * _numel(s.full_shape) for s in local if s.side == "src"}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    merged = {}
    for per_rank in everyone:
        merged.update(per_rank)
    return sum(merged.values())


def _numel(shape) -> int:
    numel = 1
    for n in shape:
        numel *= n
    return numel


def _unshard(pieces: list[tuple[dict, torch.Tensor]]) -> tuple[torch.Tensor | None, str]:
    """Assemble the full tensor from one side's shards; returns (tensor, problem) with problem '' when fine."""
    if not pieces:
        return None, "missing"
    by_position: dict[tuple, torch.Tensor] = {}
    for g, tensor in pieces:
        key = (g["dim"], g["tp_rank"], g["tp_size"], g["stride"])
        if key in by_position:
            if not bit_equal(by_position[key], tensor):
                return None, "replicas-differ"
        else:
            by_position[key] = tensor
    layouts = {(k[0], k[2], k[3]) for k in by_position}
    if len(layouts) != 1:
        return None, "mixed-layouts"
    dim, size, stride = layouts.pop()
    if sorted(k[1] for k in by_position) != list(range(size)):
        return None, "incomplete-coverage"
    if dim is None:
        return next(iter(by_position.values())), ""
    first_g, first = pieces[0]
    full = torch.empty(tuple(first_g["full_shape"]), dtype=first.dtype)
    for (_, tp_rank, _, _), tensor in by_position.items():
        geometry = Shard("", "", "", tuple(first_g["full_shape"]), dim, tp_rank, size, stride)
        full.index_copy_(dim, _global_positions(geometry, tensor.shape[dim], "cpu"), tensor)
    return full, ""


def gather_check(local: list[Shard], version: int = 0) -> list[str]:
    """Rank 0 un-shards both sides name by name and compares; returns mismatching names (rank 0 only)."""
    rank = dist.get_rank()
    names_by_rank = [None] * dist.get_world_size()
    dist.all_gather_object(names_by_rank, sorted({s.name for s in local}))
    names = sorted({n for names in names_by_rank for n in names})
    by_name: dict[str, list[Shard]] = {}
    for s in local:
        by_name.setdefault(s.name, []).append(s)
    bad = []
    for name in names:
        mine = [(s.geometry(), s.param.data.detach().cpu()) for s in by_name.get(name, [])]
        gathered = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if rank != 0:
            continue
        pieces = [p for per_rank in gathered for p in per_rank]
        src, src_problem = _unshard([p for p in pieces if p[0]["side"] == "src"])
        dst, dst_problem = _unshard([p for p in pieces if p[0]["side"] == "dst"])
        if src_problem or dst_problem or not bit_equal(src, dst):
            bad.append(name)
            continue
        full = Shard("", name, "", tuple(src.shape), None, 0, 1, 1)
        if not bit_equal(src, reference(full, tuple(src.shape), src.dtype, "cpu", version)):
            bad.append(name)
    return bad


@torch.no_grad()
def _full_logits(model: torch.nn.Module, pg_collection, tokens: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
    logits = model(tokens, positions, None)
    parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(pg_collection.tp))]
    dist.all_gather(parts, logits.contiguous(), group=pg_collection.tp)
    return torch.cat(parts, dim=-1).float()


def logits_difference(src_model, src_pg, dst_model, dst_pg, vocab_size: int, seq_length: int) -> float:
    """Largest |src - dst| logit over the largest |src| logit, same tokens through both models (all ranks).

    A sanity check on top of the bit-exact weight comparison, not a replacement: the two layouts reduce in a
    different order, so logits agree only approximately. Needs both models on every rank (collocated), a single
    pipeline stage on both sides, and CUDA (the MoE router moves its weights to the GPU in forward).
    """
    from megatron.core import parallel_state

    # The local attention takes its scratch space from Megatron's global buffer, normally set up by
    # initialize_model_parallel, which this payload does not call (each side has its own process groups).
    if getattr(parallel_state, "_GLOBAL_MEMORY_BUFFER", None) is None:
        parallel_state._set_global_memory_buffer()
    seq = min(seq_length, 128)
    tokens = (torch.arange(seq, device="cuda").unsqueeze(0) * 7919) % vocab_size
    src = _full_logits(src_model, src_pg, tokens)
    dst = _full_logits(dst_model, dst_pg, tokens)
    ratio = torch.tensor([((src - dst).abs().max() / src.abs().max().clamp_min(1e-30)).item()], device="cuda")
    dist.all_reduce(ratio, op=dist.ReduceOp.MAX)
    return float(ratio.item())
