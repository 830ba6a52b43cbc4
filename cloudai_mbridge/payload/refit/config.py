"""Refit payload configuration: the JSON schema, CLI overrides, validation and the rank layout of both sides.

Pure stdlib on purpose: the CloudAI side, the tests and the payload can all import it without torch or megatron.
The schema itself is documented in `__main__.py` (the entry point), next to the output contract.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

MODES = ("collocated", "non-collocated")
TRANSPORTS = ("gloo", "nccl", "nvshmem", "nixl")
DEVICES = ("cpu", "cuda")
DTYPES = ("bf16", "fp16", "fp32")
EXECUTORS = ("megatron", "replay", "both")  # both: Megatron-Core's own service and replay in one job (__main__)
COALESCE_SCHEDULES = ("rounds", "pairwise")  # payload/refit/coalesce.py SCHEDULES
# Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by (128) times TP; both sides must end
# up with the same padded size or the embedding cannot be resharded, so we pad with the LCM of both TP sizes.
VOCAB_DIVISOR = 128


class ConfigError(ValueError):
    """A configuration problem; the message names the field, its value and the fix."""


@dataclass
class ModelConfig:
    name: str = "moe-proxy"
    num_layers: int = 2
    hidden_size: int = 128
    ffn_hidden_size: int = 256
    moe_ffn_hidden_size: int = 64
    num_attention_heads: int = 8
    num_query_groups: int | None = None
    num_experts: int = 8
    moe_router_topk: int = 2
    moe_shared_expert_intermediate_size: int | None = None
    vocab_size: int = 1024
    seq_length: int = 128


@dataclass
class ParallelConfig:
    # None: the value upstream gives an unset size (resolve_sides). Source (training): tp, pp, ep = 1 and etp = tp
    # (Megatron-LM training/arguments.py). Destination (inference): each one the source's, etp included (Megatron-LM
    # --rl-inference-*-parallel-size = None; megatron/core/inference/shards.py build_inference_pg_collection).
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    etp: int | None = None
    # Ranks this side occupies. Collocated: must be WORLD_SIZE when given. Non-collocated: defaults to tp * pp * ep,
    # as Megatron-LM's refit benchmark sizes each side (examples/rl/benchmark_refit.py: src_world_size).
    world: int | None = None

    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp


# Megatron-LM training/arguments.py: --tensor-/--pipeline-/--expert-model-parallel-size default to 1.
SOURCE_DEFAULTS = {"tp": 1, "pp": 1, "ep": 1}


def resolve_sides(src: dict[str, Any], dst: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides with every unset (None or absent) size filled as upstream fills it.

    Source: tp, pp, ep = 1; etp stays None, which Megatron reads as tp (training/arguments.py:569,
    ModelParallelConfig.__post_init__). Destination: tp, pp, ep are the source's (Megatron-LM benchmark_refit.py:
    "default to training parallelism if not specified"), and etp is the source's expert tensor parallel size, not
    the destination's tp (training/arguments.py --rl-inference-expert-tensor-model-parallel-size: "Defaults to
    training expert_tensor_parallel_size"; core/inference/shards.py: expt_tp_size None -> the training value).
    `world` is never inherited."""
    src, dst = dict(src), dict(dst)
    for key, value in SOURCE_DEFAULTS.items():
        if src.get(key) is None:
            src[key] = value
    src.setdefault("etp", None)
    for key in SOURCE_DEFAULTS:
        if dst.get(key) is None:
            dst[key] = src[key]
    if dst.get("etp") is None:
        dst["etp"] = src["tp"] if src["etp"] is None else src["etp"]
    return src, dst


@dataclass
class RefitConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    src: ParallelConfig = field(default_factory=ParallelConfig)
    dst: ParallelConfig = field(default_factory=ParallelConfig)
    # The generator tags every payload config with its workload (the metrics parsers read it back).
    workload: str = "refit"
    mode: str = "collocated"
    transport: str = "gloo"  # Megatron-LM --refit-method default (training/arguments.py:2698, 0.19.2)
    warmup: int = 2  # Megatron-LM examples/rl/benchmark_refit.py --num-benchmark-warmup
    iterations: int = 10  # ... --num-benchmark-iterations
    seed: int = 1234
    verify: bool = True
    timeout_s: int = 600
    device: str = "cpu"
    # Optional keys (defaults keep the lead's schema valid as is).
    dtype: str = "bf16"
    # Full-tensor gather check on rank 0 only while one full copy of the model is at most this many bytes;
    # above it only the per-shard reference check runs (it scales: every rank checks its own shards).
    verify_gather_max_bytes: int = 1 << 30
    # Directory where every rank writes its source and destination shards (torch.save) for an outside check.
    dump_shards: str | None = None
    # > 0: megatron-core's plan carried by payload/refit/coalesce.py, slices packed into messages of at most this
    # many MiB per peer (gloo or nccl); 0: megatron-core's own copy service for `transport`, one message per slice.
    coalesce_mib: int = 0
    # coalesce_mib > 0 on CUDA: pack, NCCL and unpack of successive rounds overlap on side streams (off with
    # "profile": true, which times the phases one after the other); false: the serial path (for comparison).
    coalesce_overlap: bool = True
    # coalesce_mib > 0: the order of the messages (payload/refit/coalesce.py exchange_units). "rounds": bucket i of
    # every peer at once; "pairwise": step s = 1 .. world-1 sends to rank+s and receives from rank-s, one peer pair at
    # a time, that pair's buckets one after the other.
    coalesce_schedule: str = "rounds"
    # coalesce_mib > 0: the first and the last message per peer hold at most this many MiB (0: as any other). Their
    # pack and unpack are the copies no transfer hides (payload/refit/coalesce.py buckets).
    coalesce_edge_mib: int = 0
    # "megatron": every refit is swap_model_weights. "replay" (needs coalesce_mib > 0): the first refit is, later
    # ones hand megatron-core's cached plan's slice views straight to the coalescing service (payload/refit/replay.py).
    # "both" (needs coalesce_mib > 0): Megatron-Core's own service for `transport` and then "replay", in one job, and
    # the same run's exchange ceiling (payload/refit/__main__.py _compare_paths); with nvshmem / nixl ours runs over
    # the process group's backend (nccl on GPUs).
    executor: str = "megatron"
    # true: time the phases of every timed refit (submit vs run of the copy service; for coalesce_mib > 0 also
    # local/pack/comm/unpack, with CUDA syncs between them) and print REFIT_PHASES on rank 0.
    profile: bool = False
    # Set by the generator (a fresh id per generated job): printed back in REFIT_CONFIG and on every rank, so a
    # report can tell this run's logs from logs copied in from another run.
    run_id: str | None = None
    # Testing only: corrupt one destination element after the last refit (verification must fail).
    _corrupt_after_refit: bool = False
    # Testing hook: a copy service that sends the first refit's weights every time (payload/refit/coalesce.py).
    _stale_copy_service: bool = False
    # Testing only: run megatron-core unpatched (no local-expert adapter) to reproduce its planner bug.
    _no_adapter: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.src, ParallelConfig) and isinstance(self.dst, ParallelConfig):
            src, dst = resolve_sides(dataclasses.asdict(self.src), dataclasses.asdict(self.dst))
            self.src, self.dst = ParallelConfig(**src), ParallelConfig(**dst)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SideLayout:
    """Where one side (source or destination) lives and how it is cut.

    Dense ranks form the grid [tp, cp=1, dp, pp] and expert ranks the grid [etp, ep, edp, pp] over the same ranks
    (EP is carved out of tp*dp, as in Megatron), both starting at `rank_offset`.
    """

    name: str
    tp: int
    pp: int
    ep: int
    etp: int
    dp: int
    rank_offset: int

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def edp(self) -> int:
        return self.tp * self.dp // (self.etp * self.ep)

    @property
    def ranks(self) -> range:
        return range(self.rank_offset, self.rank_offset + self.world)

    def to_dict(self) -> dict[str, int]:
        return {
            "tp": self.tp, "pp": self.pp, "ep": self.ep, "etp": self.etp, "dp": self.dp, "edp": self.edp,
            "world": self.world, "first_rank": self.rank_offset,
        }


def _from_dict(cls, data: dict[str, Any], where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__} ({data!r})")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")
    kwargs = {}
    for key, value in data.items():
        if key in ("model", "src", "dst"):
            sub = ModelConfig if key == "model" else ParallelConfig
            kwargs[key] = _from_dict(sub, value, key)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def from_dict(data: dict[str, Any]) -> RefitConfig:
    return _from_dict(RefitConfig, data, "config")


def _flag(name: str) -> str:
    return "--" + name.strip("_").replace("_", "-")


def build_arg_parser() -> argparse.ArgumentParser:
    """`--config file.json`, then one flag per field (model fields bare, sides as --src-tp / --dst-ep ...)."""
    parser = argparse.ArgumentParser(
        prog="refit", description="Megatron-Core refit (resharding) benchmark with bit-exact verification."
    )
    parser.add_argument("--config", help="JSON config (see the module docstring); flags below override it")
    for f in dataclasses.fields(ModelConfig):
        parser.add_argument(_flag(f.name), dest=f"model.{f.name}", default=None, help=f"model.{f.name}")
    for side in ("src", "dst"):
        for f in dataclasses.fields(ParallelConfig):
            parser.add_argument(f"--{side}-{f.name}", dest=f"{side}.{f.name}", default=None, help=f"{side}.{f.name}")
    for f in dataclasses.fields(RefitConfig):
        if f.name in ("model", "src", "dst") or f.name.startswith("_"):
            continue
        parser.add_argument(_flag(f.name), dest=f.name, default=None, help=f.name)
    return parser


def _coerce(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        return text


def load(argv: list[str] | None = None) -> RefitConfig:
    args = build_arg_parser().parse_args(argv)
    data: dict[str, Any] = {}
    if args.config:
        with open(args.config, encoding="utf-8") as fh:
            data = json.load(fh)
    for dest, value in vars(args).items():
        if dest == "config" or value is None:
            continue
        target = data
        *parents, leaf = dest.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = _coerce(value)
    return from_dict(data)


def config_digest(argv: list[str] | None = None) -> str | None:
    """``sha256:<hex>`` of the --config file's bytes as the payload read them (None without a file): the report
    compares it with the run folder's mbridge_config.json, so a config edited after the run is caught."""
    args, _ = build_arg_parser().parse_known_args(argv)
    if not args.config:
        return None
    with open(args.config, "rb") as fh:
        return "sha256:" + hashlib.sha256(fh.read()).hexdigest()


def _need_int(value: Any, where: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}={value!r}: must be an integer >= {minimum}")
    return value


def _need_choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}={value!r}: must be one of {list(choices)}")
    return value


def _divides(divisor: int, value: int, what: str, fix: str) -> None:
    if value % divisor:
        raise ConfigError(f"{what}: {value} is not divisible by {divisor}; {fix}")


def padded_vocab_size(cfg: RefitConfig) -> int:
    multiple = VOCAB_DIVISOR * math.lcm(cfg.src.tp, cfg.dst.tp)
    return -(-cfg.model.vocab_size // multiple) * multiple


def validate(cfg: RefitConfig) -> None:
    """Checks that need no world size: types, choices and every divisibility Megatron would assert at build time."""
    m = cfg.model
    for name in ("num_layers", "hidden_size", "ffn_hidden_size", "moe_ffn_hidden_size", "num_attention_heads",
                 "num_experts", "moe_router_topk", "vocab_size", "seq_length"):
        _need_int(getattr(m, name), f"model.{name}")
    for name in ("num_query_groups", "moe_shared_expert_intermediate_size"):
        if getattr(m, name) is not None:
            _need_int(getattr(m, name), f"model.{name}")
    _need_choice(cfg.workload, "workload", ("refit",))
    _need_choice(cfg.mode, "mode", MODES)
    _need_choice(cfg.transport, "transport", TRANSPORTS)
    _need_choice(cfg.device, "device", DEVICES)
    _need_choice(cfg.dtype, "dtype", DTYPES)
    _need_choice(cfg.executor, "executor", EXECUTORS)
    _need_choice(cfg.coalesce_schedule, "coalesce_schedule", COALESCE_SCHEDULES)
    _need_int(cfg.warmup, "warmup", 1)
    _need_int(cfg.iterations, "iterations", 1)
    _need_int(cfg.seed, "seed", 0)
    _need_int(cfg.timeout_s, "timeout_s", 1)
    _need_int(cfg.verify_gather_max_bytes, "verify_gather_max_bytes", 0)
    _need_int(cfg.coalesce_mib, "coalesce_mib", 0)
    _need_int(cfg.coalesce_edge_mib, "coalesce_edge_mib", 0)
    if cfg.run_id is not None and not (isinstance(cfg.run_id, str) and cfg.run_id.isascii() and cfg.run_id.isalnum()
                                       and len(cfg.run_id) <= 64):
        raise ConfigError(f"run_id={cfg.run_id!r}: must be letters and digits (at most 64); the generator writes one")
    if cfg.coalesce_mib and cfg.transport in ("nvshmem", "nixl") and cfg.executor != "both":
        raise ConfigError(f"coalesce_mib={cfg.coalesce_mib} with transport={cfg.transport!r}: packing applies to the "
                          "send/recv transports only; set coalesce_mib to 0 or transport to 'nccl'")
    if cfg.coalesce_schedule != "rounds" and not cfg.coalesce_mib:
        raise ConfigError(f"coalesce_schedule={cfg.coalesce_schedule!r} with coalesce_mib=0: the schedule orders the "
                          "coalescing copy service's messages; set coalesce_mib > 0 or coalesce_schedule to 'rounds'")
    if cfg.coalesce_edge_mib and not 0 < cfg.coalesce_edge_mib < cfg.coalesce_mib:
        raise ConfigError(f"coalesce_edge_mib={cfg.coalesce_edge_mib} with coalesce_mib={cfg.coalesce_mib}: the first "
                          "and last messages are cut smaller than the others; set coalesce_edge_mib to 0 or below "
                          "coalesce_mib (and coalesce_mib > 0)")
    if cfg.executor in ("replay", "both") and not cfg.coalesce_mib:
        raise ConfigError(f"executor={cfg.executor!r} with coalesce_mib=0: replay hands the plan to the coalescing "
                          "copy service; set coalesce_mib > 0 or executor to 'megatron'")
    for name in ("verify", "profile", "coalesce_overlap", "_corrupt_after_refit", "_stale_copy_service", "_no_adapter"):
        if not isinstance(getattr(cfg, name), bool):
            raise ConfigError(f"{name}={getattr(cfg, name)!r}: must be true or false")
    if cfg.device == "cpu" and cfg.transport != "gloo":
        raise ConfigError(f"transport={cfg.transport!r} with device='cpu': only 'gloo' runs without GPUs; "
                          "set transport to 'gloo' or device to 'cuda'")
    if m.moe_router_topk > m.num_experts:
        raise ConfigError(f"model.moe_router_topk={m.moe_router_topk} exceeds model.num_experts={m.num_experts}; "
                          "lower moe_router_topk")
    _divides(m.num_attention_heads, m.hidden_size, "model.hidden_size",
             f"hidden_size must be a multiple of num_attention_heads={m.num_attention_heads}")
    groups = m.num_query_groups or m.num_attention_heads
    _divides(groups, m.num_attention_heads, "model.num_attention_heads",
             f"num_attention_heads must be a multiple of num_query_groups={groups}")
    for side_name in ("src", "dst"):
        side: ParallelConfig = getattr(cfg, side_name)
        for name in ("tp", "pp", "ep"):
            _need_int(getattr(side, name), f"{side_name}.{name}")
        if side.etp is not None:
            _need_int(side.etp, f"{side_name}.etp")
        if side.world is not None:
            _need_int(side.world, f"{side_name}.world")
        tp, etp = side.tp, side.expert_tp()
        fix = f"change {side_name}.tp (or the model size)"
        _divides(tp, m.num_attention_heads, f"model.num_attention_heads vs {side_name}.tp={tp}", fix)
        if groups % tp and tp % groups:  # megatron/core/transformer/transformer_config.py (0.16.1 L936-946)
            raise ConfigError(f"model.num_query_groups ({groups}) vs {side_name}.tp={tp}: num_query_groups must be a "
                              f"multiple or a divisor of tp; {fix}")
        _divides(tp, m.ffn_hidden_size, f"model.ffn_hidden_size vs {side_name}.tp={tp}", fix)
        if m.moe_shared_expert_intermediate_size:
            _divides(tp, m.moe_shared_expert_intermediate_size,
                     f"model.moe_shared_expert_intermediate_size vs {side_name}.tp={tp}", fix)
        _divides(etp, m.moe_ffn_hidden_size, f"model.moe_ffn_hidden_size vs {side_name}.etp={etp}",
                 f"change {side_name}.etp or model.moe_ffn_hidden_size")
        _divides(side.ep, m.num_experts, f"model.num_experts vs {side_name}.ep={side.ep}",
                 f"choose {side_name}.ep dividing num_experts={m.num_experts}")
        _divides(side.pp, m.num_layers, f"model.num_layers vs {side_name}.pp={side.pp}",
                 f"choose {side_name}.pp dividing num_layers={m.num_layers}")


def _side_dp(cfg: RefitConfig, side_name: str, world_size: int) -> int:
    side: ParallelConfig = getattr(cfg, side_name)
    tp, pp, ep, etp = side.tp, side.pp, side.ep, side.expert_tp()
    if cfg.mode == "collocated":
        if side.world is not None and side.world != world_size:
            raise ConfigError(f"{side_name}.world={side.world}: collocated sides use all WORLD_SIZE={world_size} "
                              f"ranks; drop {side_name}.world or launch {side.world} ranks")
        world = world_size
    else:
        world = side.world if side.world is not None else tp * pp * ep
    if world % (tp * pp):
        raise ConfigError(
            f"{side_name} world size {world} (WORLD_SIZE={world_size}, mode={cfg.mode}) is not divisible by "
            f"{side_name}.tp*{side_name}.pp={tp}*{pp}={tp * pp}; launch a multiple of {tp * pp} ranks per side or "
            f"change {side_name}.tp/{side_name}.pp")
    dp = world // (tp * pp)
    if (tp * dp) % (etp * ep):
        where = (f"WORLD_SIZE={world_size} (collocated)" if cfg.mode == "collocated" else
                 f"{side_name}.world={world}" + ("" if side.world is not None else " (tp*pp*ep, the default)"))
        size = "a world size" if cfg.mode == "collocated" else f"{side_name}.world"
        raise ConfigError(
            f"{side_name}: expert grid etp*ep={etp}*{ep}={etp * ep} must divide tp*dp={tp}*{dp}={tp * dp} (EP is "
            f"carved out of data parallel ranks; megatron/core/inference/shards.py asserts it); with {where} lower "
            f"{side_name}.ep/{side_name}.etp or use {size} that is a multiple of {pp * math.lcm(tp, etp * ep)}")
    return dp


def derive_layouts(cfg: RefitConfig, world_size: int) -> tuple[SideLayout, SideLayout]:
    """Decide which ranks hold each side and the resulting DP sizes.

    collocated:     both sides span all WORLD_SIZE ranks; dp = WORLD_SIZE / (tp*pp) per side.
    non-collocated: ranks [0, S) hold the source and [S, S+D) the destination; S and D default to tp*pp*ep
                    (Megatron-LM's refit benchmark) unless `world` is given per side. WORLD_SIZE must be at least
                    S + D; ranks [S+D, WORLD_SIZE) idle (idle_ranks): they build no model and take part in every
                    collective, as megatron-core's refit has them do ("(None, None): Idle rank").
    """
    validate(cfg)
    src_dp = _side_dp(cfg, "src", world_size)
    dst_dp = _side_dp(cfg, "dst", world_size)
    src = SideLayout("src", cfg.src.tp, cfg.src.pp, cfg.src.ep, cfg.src.expert_tp(), src_dp, 0)
    dst_offset = 0 if cfg.mode == "collocated" else src.world
    dst = SideLayout("dst", cfg.dst.tp, cfg.dst.pp, cfg.dst.ep, cfg.dst.expert_tp(), dst_dp, dst_offset)
    if cfg.mode == "non-collocated" and src.world + dst.world > world_size:
        raise ConfigError(
            f"WORLD_SIZE={world_size}: non-collocated mode needs at least src.world + dst.world = {src.world} + "
            f"{dst.world} = {src.world + dst.world} ranks (src: tp*pp*dp={src.tp}*{src.pp}*{src.dp}, dst: "
            f"tp*pp*dp={dst.tp}*{dst.pp}*{dst.dp}); launch at least {src.world + dst.world} ranks or set "
            "smaller src.world/dst.world")
    return src, dst


def idle_ranks(src: SideLayout, dst: SideLayout, world_size: int) -> range:
    """Ranks that hold neither side (non-collocated with WORLD_SIZE > src.world + dst.world): they build no model
    and pass no model to megatron-core's refit, but take part in its collectives (plan gathers, barriers)."""
    return range(max(src.rank_offset + src.world, dst.rank_offset + dst.world), world_size)


def rank_span(ranks: range) -> str:
    """``6-7`` / ``6`` / ``none``: a contiguous rank range as the report prints it."""
    if not ranks:
        return "none"
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def needs_expert_adapter(src: SideLayout, dst: SideLayout) -> bool:
    """Layouts hit by the megatron-core planner bugs for local-spec experts (see adapter)."""
    return any(side.ep > 1 or side.etp != side.tp for side in (src, dst))
