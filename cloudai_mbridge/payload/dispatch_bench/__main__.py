"""Dispatch/combine microbenchmark: ``python3 -m mbridge_payload.dispatch_bench --config mbridge_config.json`` (in
jobs) or ``python3 -m cloudai_mbridge.payload.dispatch_bench --config cfg.json``, one process per GPU (torchrun or
srun; rank/world/master from payload/dist_env.py).

Builds Megatron-Core's token dispatcher as an MoE layer does: MoEAlltoAllTokenDispatcher for ``alltoall``,
MoEFlexTokenDispatcher with ``moe_flex_dispatcher_backend`` = deepep / ncclep for the flex arms, over Megatron's
own expert-parallel groups (parallel_state.initialize_model_parallel with ep = world size, tp = pp = 1). The
tokens, routing map and probs have the training A/B's shapes: tokens per rank = seq_length x mbs, hidden, top-k,
experts; balanced routing (lines.py). Then ``warmup`` untimed and ``iterations`` timed dispatch + combine calls,
each phase between CUDA events, and the lines of lines.py.

GPUs only. No Megatron-Core dispatcher runs with a CPU-only torch (megatron-core 0.16.1, tried with gloo):
MoEAlltoAllTokenDispatcher.__init__ creates ``torch.cuda.Stream()`` for its device-to-host copies and its
preprocessing calls ``torch.cuda.current_stream()``; even MoEAllGatherTokenDispatcher's token_dispatch allocates its
gather buffer on ``torch.cuda.current_device()`` (tensor_parallel/mappings.py); the flex backends are GPU kernels.
A run without a GPU exits 2 before initializing anything.

Config keys: model (name, for the report), hidden_size, num_experts, topk, seq_length, mbs, dispatcher, warmup,
iterations, seed; optional: dtype ("bf16"|"fp32", bf16), permute_fusion (true, as the recipes),
moe_expert_rank_capacity_factor (ncclep), deepep_impl (uccl|nvidia|null), world_size (checked when given).
Exit codes: 0 done, 2 configuration error, 3 dispatcher error (not built as requested, or its library missing),
4 the combine did not give back what was dispatched.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from .. import dist_env
from ..versions import versions_line
from . import lines

EXIT_CONFIG = 2
EXIT_DISPATCHER = 3
EXIT_CHECK = 4

REQUIRED = {"model": str, "hidden_size": int, "num_experts": int, "topk": int, "seq_length": int, "mbs": int,
            "dispatcher": str, "warmup": int, "iterations": int, "seed": int}
OPTIONAL = {"dtype": "bf16", "permute_fusion": None, "moe_expert_rank_capacity_factor": None,
            "deepep_impl": None, "world_size": None, "workload": "dispatch_bench"}
CHECK_RTOL = {"bf16": 2e-2, "fp32": 1e-5}


class ConfigError(ValueError):
    pass


def load_config(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"the config is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a JSON object")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
    cfg = {**OPTIONAL, **raw}
    for key, kind in REQUIRED.items():
        if key not in raw:
            raise ConfigError(f"config key {key!r} is missing")
        if type(raw[key]) is not kind:
            raise ConfigError(f"config key {key!r} must be {kind.__name__}, got {raw[key]!r}")
    for key in ("hidden_size", "num_experts", "topk", "seq_length", "mbs", "iterations"):
        if cfg[key] < 1:
            raise ConfigError(f"{key} = {cfg[key]} must be >= 1")
    if cfg["warmup"] < 0:
        raise ConfigError(f"warmup = {cfg['warmup']} must be >= 0")
    if cfg["topk"] > cfg["num_experts"]:
        raise ConfigError(f"topk = {cfg['topk']} exceeds num_experts = {cfg['num_experts']}")
    if cfg["dispatcher"] not in lines.DISPATCHERS:
        raise ConfigError(f"dispatcher {cfg['dispatcher']!r} is not one of {', '.join(lines.DISPATCHERS)}")
    if cfg["dtype"] not in CHECK_RTOL:
        raise ConfigError(f"dtype {cfg['dtype']!r}: use bf16 or fp32")
    cf = cfg["moe_expert_rank_capacity_factor"]
    bad_cf = isinstance(cf, bool) or not isinstance(cf, (int, float)) or not math.isfinite(cf) or cf <= 0
    if cf is not None and bad_cf:
        raise ConfigError(f"moe_expert_rank_capacity_factor = {cf!r} must be null or a finite number > 0")
    if cfg["dispatcher"] == "ncclep" and cfg["moe_expert_rank_capacity_factor"] is None:
        raise ConfigError("dispatcher = 'ncclep' needs moe_expert_rank_capacity_factor (as in training)")
    return cfg


def tokens_per_rank(cfg: dict[str, Any]) -> int:
    return cfg["seq_length"] * cfg["mbs"]


def transformer_config(cfg: dict[str, Any], ep: int):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    fusion = cfg["permute_fusion"] if cfg["permute_fusion"] is not None else True
    kw: dict[str, Any] = {
        "num_layers": 1, "hidden_size": cfg["hidden_size"], "num_attention_heads": 1,
        "num_moe_experts": cfg["num_experts"], "moe_router_topk": cfg["topk"],
        "expert_model_parallel_size": ep, "moe_ffn_hidden_size": cfg["hidden_size"],
        "moe_permute_fusion": bool(fusion), "bf16": cfg["dtype"] == "bf16",
        "params_dtype": torch.bfloat16 if cfg["dtype"] == "bf16" else torch.float32,
        "moe_token_dispatcher_type": "alltoall" if cfg["dispatcher"] == "alltoall" else "flex",
        "add_bias_linear": False, "gradient_accumulation_fusion": False,
    }
    if cfg["dispatcher"] in ("deepep", "ncclep"):
        kw["moe_flex_dispatcher_backend"] = cfg["dispatcher"]
    if cfg["dispatcher"] == "ncclep":
        kw["moe_expert_rank_capacity_factor"] = float(cfg["moe_expert_rank_capacity_factor"])
    return TransformerConfig(**kw)


def build_dispatcher(cfg: dict[str, Any], ep: int, rank: int):
    """The dispatcher MoELayer would build for this config, over Megatron's default MoE process groups."""
    from megatron.core.transformer.moe import token_dispatcher as td
    from megatron.core.transformer.moe.moe_utils import get_default_pg_collection

    config = transformer_config(cfg, ep)
    per_rank = cfg["num_experts"] // ep
    local = list(range(rank * per_rank, (rank + 1) * per_rank))
    cls = td.MoEAlltoAllTokenDispatcher if config.moe_token_dispatcher_type == "alltoall" else td.MoEFlexTokenDispatcher
    return cls(per_rank, local, config=config, pg_collection=get_default_pg_collection())


def routing(cfg: dict[str, Any], rank: int, device: Any, dtype: Any):
    """(tokens [T, hidden], routing_map [T, E] bool, probs [T, E] fp32) with lines.balanced_experts routing."""
    import torch

    tokens, experts, k = tokens_per_rank(cfg), cfg["num_experts"], cfg["topk"]
    idx = torch.tensor([lines.balanced_experts(t, rank, k, experts) for t in range(tokens)], dtype=torch.long)
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool)
    routing_map.scatter_(1, idx, True)
    probs = routing_map.to(torch.float32) / k
    gen = torch.Generator().manual_seed(cfg["seed"] + rank)
    hidden = torch.randn(tokens, cfg["hidden_size"], generator=gen).to(dtype)
    return hidden.to(device), routing_map.to(device), probs.to(device)


class Timer:
    """CUDA events around each phase, recorded on the current stream (where the dispatcher's own work is ordered:
    its side streams join it before returning), read after the call's synchronize."""

    name = "cuda_events"

    def mark(self):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def elapsed_us(a, b) -> float:
        return a.elapsed_time(b) * 1e3


def one_call(dispatcher, hidden, routing_map, probs):
    """dispatch (preprocess, token_dispatch, postprocess), then combine of the dispatched tokens as they are."""
    h, p = dispatcher.dispatch_preprocess(hidden, routing_map, probs)
    h, p = dispatcher.token_dispatch(h, p)
    out = dispatcher.dispatch_postprocess(h, p)
    return out[0]


def combine(dispatcher, expert_out):
    h = dispatcher.combine_preprocess(expert_out)
    h = dispatcher.token_combine(h)
    return dispatcher.combine_postprocess(h)


def timed_loop(dispatcher, hidden, routing_map, probs, warmup: int, iterations: int, timer: Timer):
    """Per-call dispatch and combine times (µs) on this rank, and the last call's output."""
    import torch

    d_us, c_us, out = [], [], None
    for i in range(warmup + iterations):
        t0 = timer.mark()
        expert_in = one_call(dispatcher, hidden, routing_map, probs)
        t1 = timer.mark()
        out = combine(dispatcher, expert_in)
        t2 = timer.mark()
        torch.cuda.synchronize()
        if i >= warmup:
            d_us.append(timer.elapsed_us(t0, t1))
            c_us.append(timer.elapsed_us(t1, t2))
    return d_us, c_us, out


def slowest_rank(times_us: list[float], device: Any) -> list[float]:
    """Each call's time on the rank that took longest (all-reduce MAX)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(times_us, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def check_output(out, hidden, topk: int, dtype: str) -> tuple[float, float, float, bool]:
    """The combine of identity experts gives back every token times topk (unpermute sums the copies) or times the
    probs' sum (1) when the dispatcher weighs the copies by their probs; returns (scale, expected, err, ok)."""

    ref = hidden.float()
    got = out.float().reshape(ref.shape)
    denom = ref.abs().clamp_min(1e-3)
    scale = float((got.abs().sum() / ref.abs().sum()).item())
    expected = float(topk) if abs(scale - topk) < abs(scale - 1.0) else 1.0
    err = float(((got - ref * expected).abs() / (denom * expected)).max().item())
    return scale, expected, err, bool(math.isfinite(err) and err <= CHECK_RTOL[dtype] * 4)


def run(cfg: dict[str, Any], dist_info: dist_env.DistEnv) -> int:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from ..train.log import (
        built_backend,
        check_deep_ep,
        check_dispatcher,
        deep_ep_line,
        dispatcher_class_name,
        dispatcher_line,
        import_deep_ep,
    )

    rank, world = dist_info.rank, dist_info.world_size
    say = (lambda s: print(s, flush=True)) if rank == 0 else (lambda s: None)
    if cfg["num_experts"] % world:
        raise ConfigError(f"num_experts = {cfg['num_experts']} is not divisible by ep = world size {world}")
    if not torch.cuda.is_available():
        raise ConfigError("the dispatch microbenchmark needs a GPU per rank (torch.cuda.is_available() is False): "
                          "Megatron-Core's token dispatchers allocate on CUDA devices and streams")
    deep_ep = None
    if cfg["dispatcher"] == "deepep":
        deep_ep, deep_ep_error = import_deep_ep()
        check_deep_ep(cfg["dispatcher"], cfg["deepep_impl"], deep_ep, deep_ep_error)
    torch.cuda.set_device(dist_info.local_rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(expert_model_parallel_size=world)
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(cfg["seed"])
        if cfg["dispatcher"] == "ncclep":
            from ..train.nccl_ep import prepare_nccl_ep

            say(prepare_nccl_ep(cfg["topk"]))  # tp = 1: NCCL EP's top-k is the router's
        dispatcher = build_dispatcher(cfg, world, rank)
        config = dispatcher.config
        built = dispatcher_class_name(type(dispatcher).__name__, config.moe_token_dispatcher_type)
        backend = built_backend(built, getattr(config, "moe_flex_dispatcher_backend", None))
        say(dispatcher_line(cfg["dispatcher"], built, backend))
        check_dispatcher(cfg["dispatcher"], built, backend)
        if cfg["dispatcher"] == "deepep":
            say(deep_ep_line(deep_ep))
        device = torch.device("cuda", dist_info.local_rank)
        dtype = torch.bfloat16 if cfg["dtype"] == "bf16" else torch.float32
        hidden, routing_map, probs = routing(cfg, rank, device, dtype)
        elem = hidden.element_size()
        tokens = tokens_per_rank(cfg)
        logical, cross = lines.byte_counts(tokens, cfg["hidden_size"], cfg["topk"], cfg["num_experts"], world,
                                           rank, elem)
        say(lines.bytes_line(tokens=tokens, hidden=cfg["hidden_size"], topk=cfg["topk"],
                             experts=cfg["num_experts"], ep=world, elem_bytes=elem, logical_bytes=logical,
                             cross_rank_bytes=cross))
        timer = Timer()
        d_us, c_us, out = timed_loop(dispatcher, hidden, routing_map, probs, cfg["warmup"], cfg["iterations"], timer)
        scale, expected, err, ok = check_output(out, hidden, cfg["topk"], cfg["dtype"])
        oks = torch.tensor([1.0 if ok else 0.0], device=device)
        dist.all_reduce(oks, op=dist.ReduceOp.MIN)
        say(lines.check_line(scale, expected, err, bool(oks.item() == 1.0)))
        d_all, c_all = slowest_rank(d_us, device), slowest_rank(c_us, device)
        if oks.item() != 1.0:
            say(f"{lines.TAG_ERROR} the combine did not give back the dispatched tokens: no timing is reported")
            return EXIT_CHECK
        for phase, times in (("dispatch", d_all), ("combine", c_all)):
            say(lines.result_line(phase=phase, backend=cfg["dispatcher"], times_us=times, warmup=cfg["warmup"],
                                  logical_bytes=logical, cross_rank_bytes=cross, timer=timer.name, ranks=world))
        say(f"{lines.TAG_DONE} backend={cfg['dispatcher']} phases=2")
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mbridge_payload.dispatch_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="mbridge_config.json written by the generator")
    args = parser.parse_args(argv)
    from ..train.log import DispatcherError

    dist_info = None
    try:
        try:
            with open(args.config, encoding="utf-8") as f:
                text = f.read(1 << 20)
        except OSError as e:
            raise ConfigError(f"cannot read {args.config}: {e}") from None
        cfg = load_config(text)
        dist_info = dist_env.resolve()
        if cfg["world_size"] is not None and cfg["world_size"] != dist_info.world_size:
            raise ConfigError(f"world_size = {cfg['world_size']} in the config but {dist_info.world_size} processes "
                              "were started")
        dist_env.export(dist_info)
        if dist_info.rank == 0:
            print(lines.config_line(cfg), flush=True)
            print(versions_line(), flush=True)
        return run(cfg, dist_info)
    except ConfigError as e:
        _report("MBRIDGE_CONFIG_ERROR", e, dist_info)
        return EXIT_CONFIG
    except DispatcherError as e:
        _report("MBRIDGE_DISPATCHER_ERROR", e, dist_info)
        return EXIT_DISPATCHER


def _report(tag: str, error: Exception, dist_info: dist_env.DistEnv | None) -> None:
    if dist_info is None or dist_info.rank == 0:
        print(f"{tag} {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
