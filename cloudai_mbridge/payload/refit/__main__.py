"""Refit payload: reshard a real Megatron-Core GPT MoE model between two layouts, time it, prove it bit-exact.

Run:  python3 -m mbridge_payload.refit --config cfg.json      (in jobs; the package is copied as mbridge_payload)
      python3 -m cloudai_mbridge.payload.refit --config cfg.json
Rank, world size and master come from torchrun or Slurm variables (dist_env.resolve()).

Config (JSON; every field can also be given as a flag, which overrides the file: model fields as --hidden-size,
sides as --src-tp / --dst-ep, the rest as --mode, --transport, --timeout-s ...):
  {"model": {"name": str, "num_layers": int, "hidden_size": int, "ffn_hidden_size": int,
             "moe_ffn_hidden_size": int, "num_attention_heads": int, "num_query_groups": int|null,
             "num_experts": int, "moe_router_topk": int, "moe_shared_expert_intermediate_size": int|null,
             "vocab_size": int, "seq_length": int},
   "src": {"tp": 1, "pp": 1, "ep": 1, "etp": 1}, "dst": {...same},
   "mode": "collocated"|"non-collocated", "transport": "gloo"|"nccl"|"nvshmem"|"nixl",
   "warmup": int>=1, "iterations": int>=1, "seed": int, "verify": true, "timeout_s": int, "device": "cpu"|"cuda"}
Optional keys (defaults in brackets):
  src/dst "etp" [= tp, Megatron's default], src/dst "world" [see layout], "dtype": "bf16"|"fp16"|"fp32" [bf16],
  "verify_gather_max_bytes" [1 GiB], "dump_shards": dir [none; each rank writes rank<r>.pt with its shards],
  "profile" [false; REFIT_PHASES, see phases.py], "executor" ["megatron"; "replay" (coalesce_mib > 0 only): refits
  after the first skip megatron-core's executor and hand its cached plan's slice views to the coalescing service,
  see replay.py; "both" (coalesce_mib > 0 only): in one job Megatron-Core's own service for "transport", then
  "replay" over the coalescing service, then the exchange ceiling (_compare_paths; REFIT_COMPARE below)],
  "coalesce_overlap" [true; coalesce_mib > 0 on CUDA: pack/NCCL/
  unpack of successive rounds on side streams, see coalesce.py; profile=true runs them serially],
  "coalesce_schedule" ["rounds"; coalesce_mib > 0 only: "rounds" sends bucket i to every peer at once, "pairwise"
  one peer pair at a time (step s: to rank+s, from rank-s), see coalesce.exchange_units],
  "coalesce_edge_mib" [0; coalesce_mib > 0 only, below it: the first and last message per peer at most this many
  MiB, see coalesce.buckets],
  "_corrupt_after_refit" [false; testing], "_no_adapter" [false; testing: unpatched megatron-core].
  "seed" only seeds Megatron's CUDA RNG tracker (GPU builds need one; nothing random is drawn): the weights come
  from crc32(global parameter name), so every run of a model moves and checks the same values.

Layout (ranks and DP):
  collocated:     both sides span all WORLD_SIZE ranks, dp = WORLD_SIZE / (tp*pp) per side.
  non-collocated: ranks [0, S) hold the source, [S, S+D) the destination, WORLD_SIZE must be at least S + D; the
                  ranks [S+D, WORLD_SIZE) idle: no model, but they take part in every collective of the refit (the
                  plan's gathers, the barriers), as megatron-core's refit has an idle rank do ("(None, None): Idle
                  rank", resharding/refit.py 0.17+; on 0.16 a parameter-less stand-in on both sides). Per side the
                  world defaults to tp*pp*ep, as in Megatron-LM's benchmark_refit; give "world" to use another.
  Unset sizes: the source's tp, pp, ep default to 1 and its etp to its tp; the destination's tp, pp, ep and etp to
  the source's (Megatron-LM's --rl-inference-* defaults; config.resolve_sides).
  Each side: dense grid [tp, cp=1, dp, pp], expert grid [etp, ep, edp, pp] with edp = tp*dp / (etp*ep).
  The vocabulary is padded to a multiple of 128 * lcm(src.tp, dst.tp) so both sides agree on its size.

Model: Megatron-Core GPTModel, local (non-TE) spec, every layer MoE with SequentialMLP experts, GQA attention
(no MLA: refit treats every parameter alike, see models), RoPE, RMSNorm, SwiGLU, untied embeddings.

Refit: `megatron.core.resharding.swap_model_weights(src, dst, refit_method=transport)` (with `coalesce_mib` > 0 the
same plan carried by coalesce.CoalescingCopyService: slices packed into messages of at most that many MiB per
peer); `warmup` untimed calls
(the first builds the plan), then `iterations` timed calls. Before every call every destination parameter is set
to NaN. time_ms = the slowest rank's wall time from a common barrier to the return of swap_model_weights (CUDA
synchronised). After every timed call no destination element may be NaN; after the last one the weights are
verified bit-exactly without trusting the planner (verify). megatron-core bugs and CPU blockers are handled
by adapter (documented there); layouts the adapter cannot fix are refused with a message.

Output (stdout, rank 0, flushed):
  REFIT_CONFIG {json}                          resolved config, layouts, versions, world size, "idle_ranks" (ranks
      that hold neither side: "6-7", or "none"), "run_id" (the config's, set by the generator) and
      "config_digest" (sha256:<hex> of the --config file's bytes) (first line)
  REFIT_RANK rank=<r> run_id=<id|none> config_digest=<sha256:..|none>   on every rank, right after
      (the report checks both against the run folder: logs copied from another run, or a config edited after the
      run, make the run invalid)
  then, only when verification passed, one line per timed iteration:
  REFIT_ITER iter=<i> time_ms=<float>
  REFIT_COALESCE bucket_mib=<n> rounds=<n> messages=<n> overlapped=<true|false> plan_builds=<n>
      schedule=<rounds|pairwise> edge_mib=<n> per refit on rank 0 (before them, coalesce_mib > 0; rounds: exchanges, one
      batch_isend_irecv each; overlapped: the last warm-up ran on side streams; plan_builds: so far)
  REFIT_EXECUTOR name=replay ops_send=<n> ops_recv=<n>   (executor "replay", after the first warm-up; ops summed
      over ranks) or REFIT_EXECUTOR fallback reason=<word> (every refit then goes through swap_model_weights)
  REFIT_PHASES submit_ms=.. run_ms=.. rest_ms=.. [local_ms=.. pack_ms=.. comm_ms=.. unpack_ms=..]   ("profile":
      true) medians over the timed refits on rank 0: see phases.py
  REFIT_PROFILE wall_ms=.. nccl_ms=.. copy_ms=.. other_ms=.. kernels=..          (MBRIDGE_REFIT_PROFILE=1, _profile)
  REFIT_STATS bytes_remote=<int> bytes_local=<int> send_ops=<int> recv_ops=<int>
      counted from the cached reshard plan, summed over ranks; bytes on the receiving side (a "local" op is a
      copy within one rank); -1 when this megatron-core keeps the plan where we cannot find it
  REFIT_TENSOR result=<ok|mismatch> name=<global parameter name>   one per checked tensor (verify on): the
      report recomputes the verdict from these (a "src:" name is a source shard the refit must not have touched)
  REFIT_VERIFY status=<pass|fail|skipped> params=<n_checked> mismatched=<n> detail=<text without spaces>
      params = global destination parameters checked; "skipped" when "verify" is false (then only the NaN check
      after every timed refit runs, and it still fails the run)
  Mean refit time: <x> ms / Min refit time:  <x> ms / Max refit time:  <x> ms / Median refit time: <x> ms
  Effective bandwidth: <x> GB/s                (bytes_remote + bytes_local) / median time, GB = 1e9 bytes
  REFIT_COMPARE path=<megatron|ours> median_ms=<x> n=<n> pct_of_ceiling=<x|n/a>, REFIT_COMPARE path=ceiling
      median_ms=<x> n=<n> bytes_remote=<n>, REFIT_COMPARE speedup=<x>   (executor "both", passed runs only; the
      times are in REFIT_RESULT["compare"]: {"megatron": {"times_ms"}, "ours": {"times_ms"}, "ceiling":
      {"times_ms", "median_ms", "bytes_remote"} or null}; REFIT_ITER holds ours)
  REFIT_RESULT {json}                          all of the above, plus config, layouts, versions, device, world
      size, "adapter" (installed | not-needed | disabled), "model_bytes" (one full model copy), "held_bytes"
      ({"src","dst"}: parameter bytes summed over ranks; the plan writes every destination byte once, so
      bytes_remote + bytes_local == held_bytes.dst), "refit_time_ms" {mean,min,max,median,all}, "bandwidth_gbps",
      and verify.logits: on CUDA, collocated, pp=1 both sides, the largest |src-dst| logit over the largest |src|
      logit for the same tokens ("measured", reported only: layouts reduce in different orders, so this is a
      sanity figure; the weights themselves are compared bit-exactly). Elsewhere "skipped" with the reason (on CPU
      the MoE router moves its weights to CUDA in forward).
  On verification failure: REFIT_STATS, REFIT_VERIFY status=fail and REFIT_RESULT with "refit_time_ms": null and
  "bandwidth_gbps": null; no REFIT_ITER lines, no summary block; exit code 1.
  Errors: `REFIT_ERROR phase=<phase> rank=<r> message=<json string>`; exit 2 for config/layout errors
  and refused layouts, 3 for planning/refit errors, 4 when timeout_s (the whole run) expires.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import traceback
from datetime import timedelta

from .. import dist_env
from ..versions import software_versions
from .config import (
    ConfigError,
    RefitConfig,
    SideLayout,
    config_digest,
    derive_layouts,
    idle_ranks,
    load,
    needs_expert_adapter,
    padded_vocab_size,
    rank_span,
)

EXIT_VERIFY, EXIT_CONFIG, EXIT_REFIT, EXIT_TIMEOUT = 1, 2, 3, 4
_state = {"phase": "start", "rank": 0}


def _emit(line: str, *, all_ranks: bool = False) -> None:
    if all_ranks or _state["rank"] == 0:
        print(line, flush=True)


def _error(message: str, code: int, *, all_ranks: bool = True) -> None:
    """Report and leave at once: peers may be stuck in a collective that will never complete."""
    text = f"REFIT_ERROR phase={_state['phase']} rank={_state['rank']} message={json.dumps(message)}"
    _emit(text, all_ranks=all_ranks)
    print(text, file=sys.stderr, flush=True)
    os._exit(code)


def _start_watchdog(timeout_s: int) -> threading.Timer:
    """megatron-core 0.16 raises planning errors on rank 0 only; the others wait in a broadcast forever."""
    timer = threading.Timer(timeout_s, lambda: _error(f"timed out after {timeout_s} s", EXIT_TIMEOUT))
    timer.daemon = True
    timer.start()
    return timer


def _versions() -> dict[str, str]:
    """payload/versions.py's dict (python, torch, megatron_core, ... plus date_utc and host), read by the reports."""
    return software_versions()


def _sync(cfg: RefitConfig) -> None:
    import torch

    if cfg.device == "cuda":
        torch.cuda.synchronize()


def _reduce(values: list[float], op: str, cfg: RefitConfig) -> list[float]:
    import torch
    import torch.distributed as dist

    device = "cuda" if cfg.device == "cuda" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.cpu().tolist()


def _cached_plan(dst_model):
    """The reshard plan swap_model_weights cached: on the target (0.16) or module-level (0.17+, one pair here)."""
    from megatron.core.resharding import refit
    from megatron.core.utils import unwrap_model

    if dst_model is not None:
        plan = getattr(unwrap_model(dst_model), "_cached_reshard_plan", None)
        if plan is not None:
            return plan
    cache = getattr(refit, "_plan_cache", None) or {}
    return next(iter(cache.values())) if len(cache) == 1 else None


def _plan_stats(cfg: RefitConfig, dst_model) -> dict[str, int]:
    import torch.distributed as dist

    plan = _cached_plan(dst_model)
    found = 0.0 if plan is None else 1.0
    remote = local = sends = recvs = 0
    if plan is not None:
        me = dist.get_rank()
        params = dict(dst_model.named_parameters()) if dst_model is not None else {}
        for op in plan.recv_ops:
            param = params[op.param_name]
            nbytes = param.data[op.my_slice].numel() * param.element_size()
            if op.peer_rank == me:
                local += nbytes
            else:
                remote += nbytes
        sends, recvs = len(plan.send_ops), len(plan.recv_ops)
    missing, *totals = _reduce([1.0 - found, remote, local, sends, recvs], "sum", cfg)
    if missing:
        return {"bytes_remote": -1, "bytes_local": -1, "send_ops": -1, "recv_ops": -1}
    return dict(zip(("bytes_remote", "bytes_local", "send_ops", "recv_ops"), map(int, totals), strict=True))


def _side_model(cfg: RefitConfig, side: SideLayout, pg_collection):
    from .adapter import accepts_absent_side
    from .models import absent_side, build_model

    if pg_collection is not None:
        return build_model(cfg, side, pg_collection), True
    return (None if accepts_absent_side() else absent_side(cfg, side)), False


def _install_adapter(cfg: RefitConfig, src: SideLayout, dst: SideLayout) -> str:
    from .adapter import install_local_expert_fix

    if not needs_expert_adapter(src, dst):
        return "not-needed"
    if cfg._no_adapter:
        return "disabled"
    try:
        return install_local_expert_fix()
    except RuntimeError as exc:
        raise ConfigError(
            f"layout src(tp={src.tp},ep={src.ep},etp={src.etp}) -> dst(tp={dst.tp},ep={dst.ep},etp={dst.etp}) has "
            f"EP > 1 or ETP != TP, which megatron-core plans wrongly for local-spec experts, and {exc}; use ep=1 "
            "and etp=tp on both sides, or a megatron-core whose planner names local experts globally"
        ) from exc


def _timed_refits(cfg: RefitConfig, src_model, dst_model, src_shards, dst_shards,
                  first_version: int = 0) -> tuple[list[float], list[int], list[int], int]:
    """Warm-up and timed refits. Before each one the source moves to a new version of its weights (outside the timed
    window, as an optimizer step would between two RL refits) and the destination is poisoned with NaN; after each
    timed one (outside the window, verify on) every destination shard is checked against the version just sent, so
    a copy service that hands over an earlier version (NeMo-RL / Megatron-LM #6823's stale local copies) fails the
    run at the refit where it happens. Returns (times ms, refits with NaN left, refits with stale or wrong weights,
    the last version sent)."""
    import torch.distributed as dist
    from megatron.core.resharding import swap_model_weights

    from .verify import any_nan, fill_reference, poison, shard_mismatches

    method = cfg.transport
    if cfg.coalesce_mib or cfg._stale_copy_service:
        from .coalesce import make_service

        method = make_service(max(cfg.coalesce_mib, 1) << 20, stale=cfg._stale_copy_service,
                              overlap=cfg.coalesce_overlap, schedule=cfg.coalesce_schedule,
                              edge_bytes=cfg.coalesce_edge_mib << 20)
    service = method
    recorder = None
    if cfg.profile:
        import torch

        from .phases import PhaseRecorder, profiled

        recorder = PhaseRecorder(torch.cuda.synchronize if cfg.device == "cuda" else None)
        method = profiled(method, recorder)
    version = first_version
    replay = None  # executor "replay": set up after the first refit (_start_replay)

    def once() -> float:
        nonlocal version
        version += 1
        fill_reference(src_shards, version)
        poison(dst_shards)
        _sync(cfg)
        dist.barrier()
        start = time.perf_counter()
        if recorder is not None:
            recorder.begin(start)
        if replay is not None:
            replay.refit(method)
        else:
            swap_model_weights(src_model, dst_model, refit_method=method)
        _sync(cfg)
        elapsed = time.perf_counter() - start
        if recorder is not None:
            recorder.end(elapsed)
        return elapsed

    _state["phase"] = "plan"
    for i in range(cfg.warmup):
        once()
        if i == 0 and cfg.executor == "replay":
            replay = _start_replay(cfg, src_model, dst_model)
        _state["phase"] = "warmup"
        print(f"[refit] warm-up {i + 1}/{cfg.warmup} done", file=sys.stderr, flush=True)
    if cfg.coalesce_mib:
        stats = service.stats
        _emit(f"REFIT_COALESCE bucket_mib={cfg.coalesce_mib} rounds={stats['rounds'] // cfg.warmup} "
              f"messages={stats['messages'] // cfg.warmup} overlapped={str(stats.get('overlapped', False)).lower()} "
              f"plan_builds={stats.get('plan_builds', 0)} schedule={stats.get('schedule', 'rounds')} "
              f"edge_mib={cfg.coalesce_edge_mib} "
              "per refit on rank 0")
    _state["phase"] = "timed"
    if recorder is not None:
        recorder.records.clear()
    times_ms, nan_iters, stale_iters = [], [], []
    for i in range(cfg.iterations):
        elapsed = once()
        wrong = float(bool(shard_mismatches(dst_shards, version))) if cfg.verify else 0.0
        slowest, nan_left, wrong_any = _reduce([elapsed, float(any_nan(dst_shards)), wrong], "max", cfg)
        times_ms.append(slowest * 1e3)
        if nan_left:
            nan_iters.append(i)
        elif wrong_any:
            stale_iters.append(i)
    if recorder is not None and (line := recorder.line()):
        _emit(line)
    if os.environ.get(PROFILE_ENV) == "1":
        _state["phase"] = "profile"
        _profile(once, cuda=cfg.device == "cuda")
    return times_ms, nan_iters, stale_iters, version


def _start_replay(cfg: RefitConfig, src_model, dst_model):
    """Executor "replay" (replay.py), outside any timed window, after the first refit built megatron-core's plan:
    the op list from that plan, or None (every refit through swap_model_weights) if any rank cannot replay it (the
    decision is collective: megatron-core's executor barriers after run(), the replay does not). Rank 0 prints
    ``REFIT_EXECUTOR name=replay ops_send=<n> ops_recv=<n>`` (summed over ranks) or, once,
    ``REFIT_EXECUTOR fallback reason=<word>``."""
    from .replay import FallbackError, ReplayExecutor

    executor = ReplayExecutor(src_model, dst_model)
    reason = ""
    try:
        executor.build()
    except FallbackError as exc:
        reason = str(exc)
    ops = (executor.prepared.sends, executor.prepared.recvs) if executor.prepared is not None else ([], [])
    counts = [float(len(o)) for o in ops] + [float(sum(not op.tensor.is_contiguous() for op in o)) for o in ops]
    failed, total_sends, total_recvs, strided_sends, strided_recvs = _reduce([float(bool(reason)), *counts], "sum",
                                                                              cfg)
    if failed:
        import torch.distributed as dist

        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, reason)
        first = next(r for r in everyone if r)
        _emit(f"REFIT_EXECUTOR fallback reason={first}")
        return None
    _emit(f"REFIT_EXECUTOR name=replay ops_send={int(total_sends)} ops_recv={int(total_recvs)}")
    if _state["rank"] == 0:  # views megatron-core's executor would have copied (.contiguous() / staging + write-back)
        print(f"[refit] replay: strided_send={int(strided_sends)} strided_recv={int(strided_recvs)} (all ranks)",
              file=sys.stderr, flush=True)
    return executor


def _compare_paths(cfg: RefitConfig, src_model, dst_model, src_shards, dst_shards):
    """Executor "both": in one job, on the same models and ranks, first Megatron-Core's own copy service for
    ``transport`` (swap_model_weights, no coalescing: ``warmup`` + ``iterations`` refits), then ours (the replay
    executor over the coalescing service with ``coalesce_mib`` / ``coalesce_schedule``: ``warmup`` + ``iterations``),
    then the exchange ceiling (:func:`_exchange_ceiling`). Every refit sends a new version and is checked as in
    :func:`_timed_refits`. Returns ours as the run's times (REFIT_ITER), the NaN / stale refits of both (Megatron's
    named ``megatron:<i>``), the last version and the comparison for REFIT_RESULT["compare"]."""
    import dataclasses

    theirs = dataclasses.replace(cfg, executor="megatron", coalesce_mib=0, coalesce_schedule="rounds",
                                 coalesce_edge_mib=0, profile=False, _stale_copy_service=False)
    m_times, m_nan, m_stale, version = _timed_refits(theirs, src_model, dst_model, src_shards, dst_shards)
    ours = dataclasses.replace(cfg, executor="replay")
    times, nan_iters, stale_iters, version = _timed_refits(ours, src_model, dst_model, src_shards, dst_shards,
                                                           first_version=version)
    _state["phase"] = "ceiling"
    ceiling = _exchange_ceiling(cfg, src_model, dst_model)
    compare = {"megatron": {"service": cfg.transport, "times_ms": [round(t, 3) for t in m_times]},
               "ours": {"executor": "replay", "coalesce_mib": cfg.coalesce_mib, "schedule": cfg.coalesce_schedule,
                        "times_ms": [round(t, 3) for t in times]},
               "ceiling": ceiling}
    return (times, [f"megatron:{i}" for i in m_nan] + nan_iters, [f"megatron:{i}" for i in m_stale] + stale_iters,
            version, compare)


def _exchange_ceiling(cfg: RefitConfig, src_model, dst_model) -> dict | None:
    """The same run's exchange ceiling: the bytes megatron-core's cached plan moves between every pair of ranks
    (the refit's own traffic matrix, local copies left out), each pair's bytes as one contiguous message per
    direction, all of them in one ``batch_isend_irecv``, no slicing, packing or plan walking. ``warmup`` untimed
    and ``iterations`` timed repetitions, timed as a refit (barrier, sync, clock, wait, sync; the slowest rank).
    {"times_ms", "median_ms", "bytes_remote"}; None when the plan cannot be read (payload/refit/replay.py)."""
    import torch
    import torch.distributed as dist

    from .replay import FallbackError, _plan_and_tensors

    me = dist.get_rank()
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    failed = 0.0
    try:
        plan, src, dst = _plan_and_tensors(src_model, dst_model)
        for ops, params, out in ((plan.send_ops, src, sends), (plan.recv_ops, dst, recvs)):
            for op in ops:
                param = params.get(op.param_name)
                if param is not None and op.peer_rank != me:
                    nbytes = param.data[op.my_slice].numel() * param.element_size()
                    out[op.peer_rank] = out.get(op.peer_rank, 0) + nbytes
    except FallbackError:
        failed = 1.0
    if _reduce([failed], "sum", cfg)[0]:
        return None
    device = "cuda" if cfg.device == "cuda" else "cpu"
    bufs = [(dist.isend, torch.empty(n, dtype=torch.uint8, device=device), peer) for peer, n in sorted(sends.items())]
    bufs += [(dist.irecv, torch.empty(n, dtype=torch.uint8, device=device), peer) for peer, n in sorted(recvs.items())]
    ops = [dist.P2POp(fn, buf, peer) for fn, buf, peer in bufs]

    def once() -> float:
        _sync(cfg)
        dist.barrier()
        start = time.perf_counter()
        for req in (dist.batch_isend_irecv(ops) if ops else []):
            req.wait()
        _sync(cfg)
        return time.perf_counter() - start

    for _ in range(cfg.warmup):
        once()
    times = [_reduce([once()], "max", cfg)[0] * 1e3 for _ in range(cfg.iterations)]
    remote = int(_reduce([float(sum(recvs.values()))], "sum", cfg)[0])
    return {"times_ms": [round(t, 3) for t in times], "median_ms": round(statistics.median(times), 3),
            "bytes_remote": remote}


def compare_lines(compare: dict) -> list[str]:
    """REFIT_COMPARE lines (executor "both"): per path its median, n and share of the same run's ceiling (ceiling
    median / path median x 100: both move the same bytes), then Megatron's median over ours."""
    ceiling = (compare.get("ceiling") or {}).get("median_ms")
    medians = {}
    lines = []
    for path in ("megatron", "ours"):
        times = compare[path]["times_ms"]
        if not times:
            continue
        medians[path] = statistics.median(times)
        pct = f"{ceiling / medians[path] * 100:.1f}" if ceiling and medians[path] > 0 else "n/a"
        lines.append(f"REFIT_COMPARE path={path} median_ms={medians[path]:.3f} n={len(times)} pct_of_ceiling={pct}")
    if ceiling:
        lines.append(f"REFIT_COMPARE path=ceiling median_ms={ceiling:.3f} n={len(compare['ceiling']['times_ms'])} "
                     f"bytes_remote={compare['ceiling']['bytes_remote']}")
    if len(medians) == 2 and medians["ours"] > 0:
        lines.append(f"REFIT_COMPARE speedup={medians['megatron'] / medians['ours']:.3f} (megatron median / ours)")
    return lines


PROFILE_ENV = "MBRIDGE_REFIT_PROFILE"


def _profile(once, *, cuda: bool) -> None:
    """One more refit (after the timed ones, not among them) under torch.profiler; rank 0 prints where the GPU time
    went: ``REFIT_PROFILE wall_ms=.. nccl_ms=.. copy_ms=.. other_ms=.. kernels=..`` (device time summed over kernels
    and memcpys of this rank; all 0 on the CPU) and the 15 largest entries by self device (CPU: CPU) time, on
    stderr. Concurrent kernels (a send and a receive) overlap, so the sums can exceed the wall time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        wall = once()
    if _state["rank"] != 0:
        return
    buckets = {"nccl": 0.0, "copy": 0.0, "other": 0.0}
    kernels = 0
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        name = event.name.lower()
        kind = "nccl" if "nccl" in name else "copy" if ("memcpy" in name or "copy" in name or "memset" in name) \
            else "other"
        buckets[kind] += event.device_time_total / 1e3
        kernels += 1
    print(f"REFIT_PROFILE wall_ms={wall * 1e3:.3f} nccl_ms={buckets['nccl']:.3f} copy_ms={buckets['copy']:.3f} "
          f"other_ms={buckets['other']:.3f} kernels={kernels}", flush=True)
    table = prof.key_averages().table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total",
                                      row_limit=15)
    print(table, file=sys.stderr, flush=True)


def _verify(cfg: RefitConfig, src_shards, dst_shards, nan_iters, model_bytes, stale_iters=(), version=0) -> dict:
    import torch.distributed as dist

    from .verify import gather_check, shard_mismatches

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, sorted({s.name for s in dst_shards}))
    checked_names = {n for names in everyone for n in names}
    checked = len(checked_names)
    if not cfg.verify:
        if nan_iters:
            return {"status": "fail", "params": checked, "mismatched": 0,
                    "detail": f"verify-disabled;nan-after-iter={','.join(map(str, nan_iters))}"}
        return {"status": "skipped", "params": 0, "mismatched": 0, "detail": "verify-disabled;nan-each-iter"}
    bad = shard_mismatches(dst_shards, version) + [f"src:{n}" for n in shard_mismatches(src_shards, version)]
    dist.all_gather_object(everyone, bad)
    bad_names = {n for names in everyone for n in names}
    checks = ["nan-each-iter", "shard-ref"]
    if model_bytes <= cfg.verify_gather_max_bytes:
        bad_names.update(gather_check(src_shards + dst_shards, version))
        checks.append("gather")
    checks.append("each-refit")
    detail = "+".join(checks)
    if nan_iters:
        detail += f";nan-after-iter={','.join(map(str, nan_iters))}"
    if stale_iters:
        detail += f";stale-after-iter={','.join(map(str, stale_iters))}"
    if bad_names:
        detail += f";first={sorted(bad_names)[0]}"
    status = "fail" if (bad_names or nan_iters or stale_iters) else "pass"
    # one result per checked tensor: the report recomputes the verdict from these, not from the summary line
    tensors = {n: "ok" for n in checked_names} | {n: "mismatch" for n in bad_names}
    return {"status": status, "params": checked, "mismatched": len(bad_names), "detail": detail, "tensors": tensors}


def _logits_check(cfg, src, dst, src_model, src_pg, dst_model, dst_pg, verdict) -> dict:
    """CUDA-only forward comparison (see verify.logits_difference); reported, it does not gate the verdict."""
    if verdict["status"] != "pass":
        return {"status": "skipped", "reason": "weights-not-verified"}
    if cfg.device != "cuda":
        return {"status": "skipped", "reason": "cpu: the MoE router moves its weights to CUDA in forward"}
    if cfg.mode != "collocated" or src.pp != 1 or dst.pp != 1:
        return {"status": "skipped", "reason": "needs both models on every rank and pp=1 on both sides"}
    from .verify import logits_difference

    ratio = logits_difference(src_model, src_pg, dst_model, dst_pg, padded_vocab_size(cfg), cfg.model.seq_length)
    return {"status": "measured", "max_rel_diff": ratio}


def _dump_shards(directory: str, rank: int, shards) -> None:
    import torch

    os.makedirs(directory, exist_ok=True)
    payload = [{**s.geometry(), "tensor": s.param.data.detach().cpu().clone()} for s in shards]
    torch.save(payload, os.path.join(directory, f"rank{rank}.pt"))


def _report(cfg, header, times_ms, stats, verdict, model_bytes, compare=None) -> None:
    passed = verdict["status"] != "fail"
    if passed:
        for i, t in enumerate(times_ms):
            _emit(f"REFIT_ITER iter={i} time_ms={t:.3f}")
    _emit(" ".join(["REFIT_STATS", *(f"{k}={v}" for k, v in stats.items())]))
    tensors = verdict.pop("tensors", {})
    for name in sorted(tensors):
        _emit(f"REFIT_TENSOR result={tensors[name]} name={name}")
    _emit(f"REFIT_VERIFY status={verdict['status']} params={verdict['params']} mismatched={verdict['mismatched']} "
          f"detail={verdict['detail']}")
    result = {**header, **stats, "verify": verdict, "model_bytes": model_bytes,
              "refit_time_ms": None, "bandwidth_gbps": None}
    if passed:
        median = statistics.median(times_ms)
        moved = stats["bytes_remote"] + stats["bytes_local"] if stats["bytes_remote"] >= 0 else None
        bandwidth = moved / (median / 1e3) / 1e9 if moved is not None and median > 0 else None
        summary = {"mean": statistics.fmean(times_ms), "min": min(times_ms), "max": max(times_ms), "median": median,
                   "all": [round(t, 3) for t in times_ms]}
        _emit(f"Mean refit time: {summary['mean']:.2f} ms")
        _emit(f"Min refit time:  {summary['min']:.2f} ms")
        _emit(f"Max refit time:  {summary['max']:.2f} ms")
        _emit(f"Median refit time: {summary['median']:.2f} ms")
        _emit(f"Effective bandwidth: {'n/a' if bandwidth is None else f'{bandwidth:.3f}'} GB/s")
        result.update(refit_time_ms=summary, bandwidth_gbps=bandwidth)
        if compare is not None:
            for line in compare_lines(compare):
                _emit(line)
            result["compare"] = compare
    _emit("REFIT_RESULT " + json.dumps(result, sort_keys=True))


def config_header(cfg: RefitConfig, src: SideLayout, dst: SideLayout, world_size: int, digest: str | None) -> dict:
    """What REFIT_CONFIG prints (and REFIT_RESULT repeats): what ran, with the run id and the config's digest."""
    return {"config": cfg.to_dict(), "layout": {"src": src.to_dict(), "dst": dst.to_dict()},
            "padded_vocab_size": padded_vocab_size(cfg), "world_size": world_size,
            "idle_ranks": rank_span(idle_ranks(src, dst, world_size)), "device": cfg.device,
            "mode": cfg.mode, "transport": cfg.transport, "versions": _versions(), "run_id": cfg.run_id,
            "config_digest": digest}


def rank_line(rank: int, cfg: RefitConfig, digest: str | None) -> str:
    """The line every rank prints first: which run, which config file, so a report can refuse a copied-in log."""
    return f"REFIT_RANK rank={rank} run_id={cfg.run_id or 'none'} config_digest={digest or 'none'}"


def run(cfg: RefitConfig, env: dist_env.DistEnv, digest: str | None = None) -> int:
    import torch
    import torch.distributed as dist

    from .groups import build_pg_collection
    from .verify import corrupt_one, describe, fill_reference, model_bytes

    _state["phase"] = "layout"
    src, dst = derive_layouts(cfg, env.world_size)
    header = config_header(cfg, src, dst, env.world_size, digest)
    _emit("REFIT_CONFIG " + json.dumps(header, sort_keys=True))
    _emit(rank_line(env.rank, cfg, digest), all_ranks=True)

    _state["phase"] = "init"
    transport_env(cfg.transport, os.environ)
    if cfg.device == "cuda":
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group("nccl" if cfg.device == "cuda" else "gloo", rank=env.rank, world_size=env.world_size,
                            timeout=timedelta(seconds=cfg.timeout_s))
    header["adapter"] = _install_adapter(cfg, src, dst)
    if cfg.device == "cpu":
        from .adapter import prepare_cpu_transport

        prepare_cpu_transport(cfg.transport)

    _state["phase"] = "build"
    if cfg.device == "cuda":
        from .models import seed_cuda_rng_tracker

        seed_cuda_rng_tracker(cfg.seed)
    src_pg, dst_pg = build_pg_collection(src), build_pg_collection(dst)
    src_model, has_src = _side_model(cfg, src, src_pg)
    dst_model, has_dst = _side_model(cfg, dst, dst_pg)
    if not (has_src or has_dst):
        print(f"[refit] rank {env.rank} idle: holds neither side, takes part in the collectives", file=sys.stderr,
              flush=True)
    experts = cfg.model.num_experts
    src_shards = describe(src_model, "src", src_pg, experts) if has_src else []
    dst_shards = describe(dst_model, "dst", dst_pg, experts) if has_dst else []
    fill_reference(src_shards)  # version 0; every refit sends a new one (_timed_refits)
    full_bytes = model_bytes(src_shards)
    held = _reduce([sum(s.param.numel() * s.param.element_size() for s in shards)
                    for shards in (src_shards, dst_shards)], "sum", cfg)
    header["held_bytes"] = {"src": int(held[0]), "dst": int(held[1])}
    if env.rank == 0:
        print(f"[refit] models built: {full_bytes} bytes per full copy; adapter={header['adapter']}", file=sys.stderr,
              flush=True)

    compare = None
    if cfg.executor == "both":
        times_ms, nan_iters, stale_iters, version, compare = _compare_paths(cfg, src_model, dst_model, src_shards,
                                                                            dst_shards)
    else:
        times_ms, nan_iters, stale_iters, version = _timed_refits(cfg, src_model, dst_model, src_shards, dst_shards)
    _state["phase"] = "stats"
    stats = _plan_stats(cfg, dst_model)

    _state["phase"] = "verify"
    if cfg._corrupt_after_refit and has_dst and env.rank == dst.ranks[-1]:
        print(f"[refit] testing hook: corrupted {corrupt_one(dst_shards)}", file=sys.stderr, flush=True)
    verdict = _verify(cfg, src_shards, dst_shards, nan_iters, full_bytes, stale_iters, version)
    verdict["logits"] = _logits_check(cfg, src, dst, src_model, src_pg, dst_model, dst_pg, verdict)
    if cfg.dump_shards:
        _dump_shards(cfg.dump_shards, env.rank, src_shards + dst_shards)
    _report(cfg, header, times_ms, stats, verdict, full_bytes, compare)
    dist.barrier()
    dist.destroy_process_group()
    return EXIT_VERIFY if verdict["status"] == "fail" else 0


def transport_env(transport: str, environ) -> None:
    """What a transport needs in the environment before it starts. Megatron-Core's NVSHMEM copy service refuses to
    start unless NVSHMEM_MAX_CTAS is exactly "2" (its initialisation can hang with more CTAs:
    resharding/nvshmem_copy_service/core/gpu_resource_manager.py); seen on 4 x H100, 2026-11-28. A value the user set
    is left alone, so their choice and Megatron's error about it stay visible."""
    if transport == "nvshmem":
        environ.setdefault("NVSHMEM_MAX_CTAS", "2")


def main(argv: list[str] | None = None) -> int:
    try:
        env = dist_env.resolve()
    except ValueError as exc:
        _error(str(exc), EXIT_CONFIG)
    dist_env.export(env)
    _state["rank"] = env.rank
    _state["phase"] = "config"
    try:
        cfg = load(argv)
        digest = config_digest(argv)
        derive_layouts(cfg, env.world_size)
    except (ConfigError, OSError, json.JSONDecodeError, TypeError) as exc:
        _error(str(exc), EXIT_CONFIG, all_ranks=False)
    timer = _start_watchdog(cfg.timeout_s)
    try:
        code = run(cfg, env, digest)
    except ConfigError as exc:
        _error(str(exc), EXIT_CONFIG)
    except Exception as exc:
        traceback.print_exc()
        _error(f"{type(exc).__name__}: {exc}", EXIT_REFIT)
    timer.cancel()
    return code


if __name__ == "__main__":
    sys.exit(main())
