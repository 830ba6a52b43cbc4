"""GPU refit over NCCL with Kimi-K2-shaped layers, next to the NCCL point-to-point ceiling between the same GPUs.

Method (one command, one host, ``--world`` GPUs, default 2):

1. P2P ceiling: ``--world`` processes (torch.multiprocessing), NCCL, bf16 tensors of random values. Each rank
   exchanges one tensor of S bytes with its ring neighbours in one ``batch_isend_irecv`` (send to rank+1, receive
   from rank-1; with 2 ranks: both directions at once, which is what a collocated refit does). Also measured:
   one-way (rank 0 -> 1 only) and "batched" exchanges where the S bytes travel as K equal tensors in one
   ``batch_isend_irecv`` (the way Megatron-Core's NCCLCopyService submits a refit: one group of many ops).
   Timing as the refit payload times itself: per repetition barrier, CUDA sync, host clock, ops, wait, CUDA sync;
   the slowest rank's time counts. ``--p2p-warmup`` untimed repetitions, then ``--p2p-reps`` timed ones; median,
   min, max reported. Bandwidth per GPU = S received by each GPU / median time (GB = 1e9 B; GiB/s shown too).
2. Refit: the project's refit payload (``cloudai_mbridge.payload.refit``, launched as ``--world`` local ranks by
   ``payload/refit_local.launch``), Megatron-Core ``swap_model_weights(..., refit_method="nccl")``, collocated,
   Kimi-K2-shaped MoE layers (hidden 7168, 64 heads / 8 query groups, 384 experts, moe ffn 2048, shared expert
   2048, vocab 163840, untied), warm-up 2, 5 timed iterations, bit-exact verification on. The payload's
   "effective bandwidth" is (bytes_remote + bytes_local summed over ranks) / median time: bytes of the whole
   destination written per second by all GPUs together, local device copies included. To compare like with like
   this script also reports, per GPU: remote bytes received per GPU / median time (the NCCL part) and
   (remote + local) / world / median time, and the remote figure as % of the exchange ceiling at the largest size
   and of the batched ceiling whose op size is nearest to the refit's mean remote op size.
   A layout whose run fails with ``--layers`` > 1 is retried once with 1 layer (reported as such).

Each refit run is also written as a run folder (``<out>/runs/<name>/mbridge_config.json`` + ``logs/rank-<R>.log``,
each rank's stdout then its stderr) and read back with ``cloudai_mbridge.metrics.parse_refit_run``.

Run (on a GPU host, megatron-core importable): python3 benchmarks/gpu_refit_nccl.py --out /tmp/refit
          [--layers 2] [--pairs tp2-ep2 tp1ep2-tp2ep1] [--skip-p2p] [--dry-run: print the configs, no GPU needed]
          [--coalesce-mib 0 1024 [--coalesce-overlap on|off|both (default: each size with and without overlap)]]
          [--executor megatron|replay|both|compare (default megatron; coalesce sizes > 0 only; replay runs end in
           _rp; compare: the payload's executor "both", Megatron-Core's own service for the transport and ours
           (replay) in one job with the plan's own exchange ceiling, every transport, runs end in _vs, rows carry
           "paths": both medians, n, % of both ceilings, the speed-up with its 95 % interval)]
          [--coalesce-schedule rounds pairwise (default rounds; coalesce sizes > 0 run once per schedule listed;
           pairwise runs end in _pw, rows carry "coalesce_schedule")]
          [--coalesce-edge-mib 0 64 (default 0; coalesce sizes > 0 run once per value below the size; the first
           and last message per peer at most that many MiB; runs end in _e<mib>, rows carry "coalesce_edge_mib")]
Prints a short table and ``RESULT <metric>=<value> <unit>`` lines; writes ``<out>/gpu_refit_nccl.json``.
Exit status 3, with one line and before anything is written, on a host with fewer CUDA GPUs than ``--world`` or
without megatron-core (``--dry-run`` needs neither; ``--p2p-only --p2p-device cpu`` needs no GPU); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from provenance import provenance, require_gpu  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIB = 1 << 20
GIB = 1 << 30

KIMI_SHAPE = {
    "hidden_size": 7168, "ffn_hidden_size": 18432, "moe_ffn_hidden_size": 2048, "num_attention_heads": 64,
    "num_query_groups": 8, "num_experts": 384, "moe_router_topk": 8, "moe_shared_expert_intermediate_size": 2048,
    "vocab_size": 163840, "seq_length": 4096,
}
# name -> (src, dst). The destination's etp is its own tp, as these pairs have always run: unset, it would be the
# source's (payload/refit/config.py resolve_sides), which tp4 -> ep4 cannot hold (etp*ep = 16 > 4 ranks).
PAIRS = {
    "tp2-ep2": ({"tp": 2, "pp": 1, "ep": 1}, {"tp": 1, "pp": 1, "ep": 2, "etp": 1}),
    "tp1ep2-tp2ep1": ({"tp": 1, "pp": 1, "ep": 2}, {"tp": 2, "pp": 1, "ep": 1, "etp": 2}),
    # 4 GPUs (--world 4)
    "tp4-ep4": ({"tp": 4, "pp": 1, "ep": 1}, {"tp": 1, "pp": 1, "ep": 4, "etp": 1}),
    "tp2ep2-tp4": ({"tp": 2, "pp": 1, "ep": 2}, {"tp": 4, "pp": 1, "ep": 1, "etp": 4}),
}
TRANSPORTS = ("gloo", "nccl", "nvshmem", "nixl")
EXCHANGE_SIZES_MIB = (16, 64, 256, 1024, 4096)
BATCHED_OP_MIB = (4, 16, 64, 256)  # each batched test moves the largest exchange size as K ops of this size


def refit_config(pair: str, layers: int, args: argparse.Namespace, coalesce_mib: int = 0,
                 transport: str = "nccl", overlap: bool | None = None, executor: str = "megatron",
                 schedule: str | None = None, edge: int = 0) -> dict:
    src, dst = PAIRS[pair]
    cfg = {
        "coalesce_mib": coalesce_mib,
        "workload": "refit",
        "model": {"name": f"kimi-k2-shaped-{layers}layer", "num_layers": layers, **KIMI_SHAPE},
        "src": src, "dst": dst, "mode": "collocated", "transport": transport, "warmup": args.warmup,
        "iterations": args.iterations, "seed": 0, "verify": True, "timeout_s": args.refit_timeout_s,
        "device": "cuda",
    }
    if getattr(args, "profile", False):
        cfg["profile"] = True
    if coalesce_mib and overlap is not None:
        cfg["coalesce_overlap"] = overlap
    if executor != "megatron":
        cfg["executor"] = executor
    if coalesce_mib and schedule is not None:
        cfg["coalesce_schedule"] = schedule
    if coalesce_mib and edge:
        cfg["coalesce_edge_mib"] = edge
    return cfg


OVERLAP_CHOICES = {"on": (True,), "off": (False,), "both": (True, False)}
# compare: the payload's executor "both" (one job: Megatron-Core's own service for the transport, then replay)
EXECUTOR_CHOICES = {"megatron": ("megatron",), "replay": ("replay",), "both": ("megatron", "replay"),
                    "compare": ("both",)}
SCHEDULE_CHOICES = ("rounds", "pairwise")  # payload coalesce_schedule (payload/refit/coalesce.py exchange_units)


def refit_runs(args: argparse.Namespace) -> list[tuple[str, str, int, bool | None, str, str | None, int]]:
    """(pair, transport, coalesce_mib, coalesce_overlap, executor, coalesce_schedule, coalesce_edge_mib) per refit
    run: coalescing is combined with nccl only, and each coalesce size runs once per --coalesce-overlap choice (None:
    megatron-core's service, no such switch), per --executor choice (replay needs coalescing: coalesce_mib 0 runs
    megatron's executor only), per --coalesce-schedule value (None with coalesce_mib 0), schedules next to each
    other, and per --coalesce-edge-mib value below the size (0 with coalesce_mib 0)."""
    overlaps = OVERLAP_CHOICES[getattr(args, "coalesce_overlap", "both")]
    executors = EXECUTOR_CHOICES[getattr(args, "executor", "megatron")]
    schedules = tuple(dict.fromkeys(getattr(args, "coalesce_schedule", None) or ("rounds",)))
    edges = tuple(dict.fromkeys(getattr(args, "coalesce_edge_mib", None) or (0,)))
    return [(pair, t, c, ov, ex, sc, e) for pair in args.pairs for t in args.transports for c in args.coalesce_mib
            if c == 0 or t == "nccl" or executors == ("both",) for ov in ((None,) if c == 0 else overlaps)
            for ex in (("megatron",) if c == 0 else executors) for sc in ((None,) if c == 0 else schedules)
            for e in ((0,) if c == 0 else tuple(x for x in edges if x < c))]


def overlap_suffix(overlap: bool | None) -> str:
    return "" if overlap is None else ("_ov" if overlap else "_noov")


def executor_suffix(executor: str | None) -> str:
    return {"replay": "_rp", "both": "_vs"}.get(executor or "", "")


def schedule_suffix(schedule: str | None) -> str:
    return "_pw" if schedule == "pairwise" else ""


def edge_suffix(edge: int | None) -> str:
    return f"_e{edge}" if edge else ""


def run_name(pair: str, layers: int, transport: str, coalesce_mib: int, overlap: bool | None = None,
             executor: str = "megatron", schedule: str | None = None, edge: int = 0) -> str:
    """nccl runs keep their old names (refit_<pair>_<n>l[_c<mib>]); other transports add _<transport>; coalescing
    runs end in _ov / _noov (coalesce_overlap on / off), then _rp with executor "replay", then _pw with
    coalesce_schedule "pairwise" ("rounds", the default, adds nothing)."""
    return (f"refit_{pair}_{layers}l" + ("" if transport == "nccl" else f"_{transport}")
            + (f"_c{coalesce_mib}" if coalesce_mib else "") + overlap_suffix(overlap) + executor_suffix(executor)
            + schedule_suffix(schedule) + edge_suffix(edge))


def first_error_line(row: dict, tail: str) -> str | None:
    """The payload's first REFIT_ERROR line (whole), else the last exception-looking line of the ranks' output."""
    lines = [ln.strip() for ln in tail.splitlines()]
    for ln in lines:
        if ln.startswith("REFIT_ERROR"):
            return ln[:600]
    for ln in reversed(lines):
        if ("Error" in ln and ":" in ln) or "Exception" in ln or "Killed" in ln:
            return ln[:600]
    return next((ln[:400] for ln in reversed(lines) if ln and not ln.startswith("---")), None)


# --- P2P ceiling ---------------------------------------------------------------------------------------------------
def _p2p_worker(rank: int, world: int, port: int, plan: list[dict], warmup: int, reps: int, result_path: str,
                device: str = "cuda") -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    else:  # testing the code path on a machine without GPUs
        dist.init_process_group("gloo", rank=rank, world_size=world)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    largest = max(p["bytes"] for p in plan)
    send = _rank_values(rank, largest // 2, device)
    recv = torch.empty_like(send)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    expected = _rank_values(prv, largest // 2, device)  # what the left neighbour sent, to check one-op exchanges
    rows = []
    for p in plan:
        n, k = p["bytes"] // 2, p["ops"]
        per = n // k
        ops = []
        if p["mode"] == "exchange":
            for i in range(k):
                ops.append(dist.P2POp(dist.isend, send[i * per:(i + 1) * per], nxt))
                ops.append(dist.P2POp(dist.irecv, recv[i * per:(i + 1) * per], prv))
        elif rank == 0:  # one-way 0 -> 1
            ops = [dist.P2POp(dist.isend, send[i * per:(i + 1) * per], 1) for i in range(k)]
        elif rank == 1:
            ops = [dist.P2POp(dist.irecv, recv[i * per:(i + 1) * per], 0) for i in range(k)]
        recv.fill_(float("nan"))  # poison: the data check below must see every element written
        times = []
        for i in range(warmup + reps):
            sync()
            dist.barrier()
            sync()
            start = time.perf_counter()
            if ops:
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if p["mode"] == "exchange" and p["ops"] == 1:
            ok = torch.tensor([float(torch.equal(recv[:per].view(torch.int16), expected[:per].view(torch.int16)))],
                              device=device)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            p = {**p, "data_check": "pass" if ok.item() == 1.0 else "fail"}
        rows.append({**p, "times_s": slowest.cpu().tolist()})
    if rank == 0:
        Path(result_path).write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()


def _rank_values(rank: int, n: int, device: str):
    """The random bf16 values rank `rank` sends (one generator per rank, so a peer can recompute them)."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(1234 + rank)
    return torch.randn(n, dtype=torch.bfloat16, device=device, generator=gen)


def p2p_plan(world: int, sizes_mib=EXCHANGE_SIZES_MIB, batched_op_mib=BATCHED_OP_MIB) -> list[dict]:
    plan = [{"mode": "exchange", "bytes": s * MIB, "ops": 1} for s in sizes_mib]
    total = max(sizes_mib) * MIB
    plan += [{"mode": "exchange", "bytes": total, "ops": total // (k * MIB)} for k in batched_op_mib if k * MIB < total]
    if world == 2:
        plan.append({"mode": "oneway", "bytes": total, "ops": 1})
    return plan


def measure_p2p(world: int, warmup: int, reps: int, out: Path, plan: list[dict], device: str = "cuda") -> list[dict]:
    import torch.multiprocessing as mp

    from cloudai_mbridge.payload.refit.local import free_port

    result_path = out / "p2p_raw.json"
    mp.spawn(_p2p_worker, args=(world, free_port(), plan, warmup, reps, str(result_path), device), nprocs=world,
             join=True)
    rows = json.loads(result_path.read_text())
    for r in rows:
        med = statistics.median(r["times_s"])
        r.update(median_ms=med * 1e3, min_ms=min(r["times_s"]) * 1e3, max_ms=max(r["times_s"]) * 1e3,
                 op_bytes=r["bytes"] // r["ops"], gbps_per_gpu=r["bytes"] / med / 1e9,
                 gibps_per_gpu=r["bytes"] / med / GIB,
                 spread_pct=(max(r["times_s"]) - min(r["times_s"])) / med * 100)
    return rows


def print_p2p(rows: list[dict]) -> None:
    print("\nNCCL point-to-point, bf16, per GPU = bytes each GPU receives / median time (slowest rank)")
    print(f"{'mode':>9} {'total':>9} {'ops':>5} {'op size':>9} {'median_ms':>10} {'min_ms':>8} {'max_ms':>8} "
          f"{'GB/s':>8} {'GiB/s':>8} {'spread%':>8} check")
    for r in rows:
        print(f"{r['mode']:>9} {_size(r['bytes']):>9} {r['ops']:>5} {_size(r['op_bytes']):>9} {r['median_ms']:>10.3f} "
              f"{r['min_ms']:>8.3f} {r['max_ms']:>8.3f} {r['gbps_per_gpu']:>8.1f} {r['gibps_per_gpu']:>8.1f} "
              f"{r['spread_pct']:>8.1f} {r.get('data_check', '-')}", flush=True)


def _size(n: int) -> str:
    return f"{n // GIB} GiB" if n >= GIB and n % GIB == 0 else f"{n / MIB:g} MiB"


# --- refit ---------------------------------------------------------------------------------------------------------
def write_run_folder(folder: Path, cfg: dict, run) -> None:
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    from cloudai_mbridge.payload.refit.local import config_text

    # the bytes the ranks read (their logged digest must match the folder's config, or the run reads as edited)
    (folder / "mbridge_config.json").write_text(config_text(cfg))
    for rank, (out, err) in enumerate(zip(run.stdout, run.stderr, strict=True)):
        (folder / "logs" / f"rank-{rank}.log").write_text(out + err)


def run_refit(pair: str, layers: int, args: argparse.Namespace, out: Path, coalesce_mib: int = 0,
              transport: str = "nccl", overlap: bool | None = None, executor: str = "megatron",
              schedule: str | None = None, edge: int = 0) -> dict:
    from cloudai_mbridge.metrics import parse_refit_run
    from cloudai_mbridge.payload.refit.local import launch

    cfg = refit_config(pair, layers, args, coalesce_mib, transport, overlap, executor, schedule, edge)
    name = run_name(pair, layers, transport, coalesce_mib, overlap, executor, schedule, edge)
    start = time.perf_counter()
    run = launch(cfg, args.world, timeout=args.refit_timeout_s + 60, env={"PYTHONUNBUFFERED": "1"}, cwd=ROOT)
    wall = time.perf_counter() - start
    folder = out / "runs" / name
    write_run_folder(folder, cfg, run)
    m = parse_refit_run(folder)
    row = {"name": name, "pair": pair, "layers": layers, "transport": transport, "coalesce_mib": coalesce_mib,
           "coalesce_overlap": overlap, "executor": executor, "coalesce_schedule": cfg.get("coalesce_schedule"),
           "coalesce_edge_mib": cfg.get("coalesce_edge_mib", 0), "src": cfg["src"],
           "dst": cfg["dst"],
           "returncodes": run.returncodes, "wall_s": wall, "status": m.status, "problems": list(m.problems),
           "verify": m.verify.status if m.verify else None,
           "verify_detail": m.verify.detail if m.verify else None, "times_ms": [ms for _, ms in m.iterations],
           "median_ms": m.time_ms.median, "min_ms": m.time_ms.min, "max_ms": m.time_ms.max,
           "bytes_remote": m.bytes_remote, "bytes_local": m.bytes_local, "send_ops": m.send_ops,
           "recv_ops": m.recv_ops, "payload_bandwidth_gbps": m.bandwidth_gbps, "run_folder": str(folder)}
    result = m.result or {}
    row.update(model_bytes=result.get("model_bytes"), held_bytes=result.get("held_bytes"),
               logits=(result.get("verify") or {}).get("logits"), versions=result.get("versions"),
               error=run.parsed.get("refit_error"), phases=getattr(m, "phases", None),
               executor_line=getattr(m, "executor", None), compare=result.get("compare"))
    if row["times_ms"]:
        first, last = row["times_ms"][0], row["times_ms"][-1]
        row.update(first_ms=first, last_ms=last, drift_pct=(last - first) / first * 100 if first else None)
    if not m.ok:
        row["tail"] = run.describe()[-4000:]
        row["first_error"] = first_error_line(row, run.describe())
    return row


def derive(row: dict, world: int, ceiling: dict | None, batched: list[dict]) -> None:
    """Per-GPU figures of one refit row, and its share of the measured ceilings."""
    med = row.get("median_ms")
    if not med or row.get("bytes_remote") is None or row["bytes_remote"] < 0:
        return
    s = med / 1e3
    remote, local = row["bytes_remote"], row["bytes_local"]
    row["remote_gbps_per_gpu"] = remote / world / s / 1e9
    row["moved_gbps_per_gpu"] = (remote + local) / world / s / 1e9
    remote_ops = row["recv_ops"]  # upper bound on remote ops: recv_ops counts local copies too
    row["mean_op_bytes"] = (remote + local) / remote_ops if remote_ops else None
    if ceiling:
        row["ceiling"] = {k: ceiling[k] for k in ("mode", "bytes", "ops", "gbps_per_gpu")}
        row["pct_of_p2p"] = 100 * row["remote_gbps_per_gpu"] / ceiling["gbps_per_gpu"]
        row["moved_pct_of_p2p"] = 100 * row["moved_gbps_per_gpu"] / ceiling["gbps_per_gpu"]
    if batched and row["mean_op_bytes"]:
        near = min(batched, key=lambda r: abs(r["op_bytes"] - row["mean_op_bytes"]))
        row["batched_ceiling"] = {k: near[k] for k in ("bytes", "ops", "op_bytes", "gbps_per_gpu")}
        row["pct_of_batched"] = 100 * row["remote_gbps_per_gpu"] / near["gbps_per_gpu"]
    if row.get("compare"):  # executor "both": Megatron-Core's service and ours of the same job, the same ceilings
        from cloudai_mbridge.reports.refit_stats import compare_paths

        paths = compare_paths(row["compare"])
        for path in ("megatron", "ours"):
            m = paths.get(f"{path}_median_ms")
            if m and ceiling:
                paths[f"{path}_pct_of_p2p"] = 100 * remote / world / (m / 1e3) / 1e9 / ceiling["gbps_per_gpu"]
        row["paths"] = paths


def print_refit(rows: list[dict]) -> None:
    print("\nRefit (collocated, Kimi-K2-shaped layers, bf16); times = slowest rank per timed iteration")
    print(f"{'run':>32} {'verify':>6} {'model GB':>9} {'remote GB':>9} {'local GB':>9} {'median_ms':>10} "
          f"{'min..max ms':>16} {'payload GB/s':>12} {'remote GB/s/GPU':>15} {'% p2p':>6} {'% batched':>9}")
    for r in rows:
        if r.get("median_ms") is None:
            print(f"{r['name']:>32} {r.get('verify')!s:>6} status={r['status']} rc={r['returncodes']} "
                  f"error={r.get('first_error') or r.get('error')}")
            continue
        print(f"{r['name']:>32} {r['verify']:>6} {(r['model_bytes'] or 0) / 1e9:>9.2f} {r['bytes_remote'] / 1e9:>9.2f} "
              f"{r['bytes_local'] / 1e9:>9.2f} {r['median_ms']:>10.2f} "
              f"{r['min_ms']:>7.2f}..{r['max_ms']:<8.2f} {r['payload_bandwidth_gbps']:>12.1f} "
              f"{r.get('remote_gbps_per_gpu', float('nan')):>15.1f} {r.get('pct_of_p2p', float('nan')):>6.1f} "
              f"{r.get('pct_of_batched', float('nan')):>9.1f}", flush=True)
        if r.get("times_ms"):
            print(f"{'':>32} iterations ms: first {r['first_ms']:.2f} last {r['last_ms']:.2f} drift "
                  f"{r['drift_pct']:+.1f} % all {[round(t, 2) for t in r['times_ms']]}")
        if r.get("executor_line"):
            print(f"{'':>32} executor: " + " ".join(f"{k}={v}" for k, v in r["executor_line"].items()))
        if r.get("phases"):
            print(f"{'':>32} phases (median ms): " + " ".join(f"{k}={v:.2f}" for k, v in r["phases"].items()))
        if r.get("paths"):
            print(f"{'':>32} {paths_line(r['paths'])}")


def paths_line(p: dict) -> str:
    """One job's two paths (executor "both"): each median, n, % of the exchange ceiling of step 1 (p2p) and of the
    plan's own ceiling (the payload's), then the speed-up of ours with its 95 % interval and verdict."""
    def one(path: str) -> str:
        if p.get(f"{path}_median_ms") is None:
            return f"{path}: no time"
        p2p, plan = p.get(f"{path}_pct_of_p2p"), p.get(f"{path}_pct_of_ceiling")
        return (f"{path} {p[f'{path}_median_ms']:.2f} ms (n={p[f'{path}_n']}, "
                f"{'n/a' if p2p is None else f'{p2p:.1f}'} % of p2p, {'n/a' if plan is None else f'{plan:.1f}'} % "
                "of the plan's ceiling)")
    speed = ("speed-up n/a" if p.get("speedup") is None else
             f"speed-up {p['speedup']:.2f}x [{p['speedup_ci95'][0]:.2f}..{p['speedup_ci95'][1]:.2f}]")
    return f"{one('megatron')} | {one('ours')} | {speed}, {p.get('speedup_verdict')}"


# --- provenance ----------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON result and the run folders")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pairs", nargs="+", default=["tp2-ep2", "tp1ep2-tp2ep1"], choices=sorted(PAIRS))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--refit-timeout-s", type=int, default=240)
    parser.add_argument("--p2p-warmup", type=int, default=3)
    parser.add_argument("--p2p-reps", type=int, default=10)
    parser.add_argument("--skip-p2p", action="store_true")
    parser.add_argument("--transports", nargs="+", default=["nccl"], choices=TRANSPORTS,
                        help="refit_method per run; coalesce sizes > 0 run with nccl only")
    parser.add_argument("--profile", action="store_true",
                        help="payload profile=true: REFIT_PHASES (submit/run; coalesce: local/pack/comm/unpack)")
    parser.add_argument("--coalesce-mib", type=int, nargs="+", default=[0],
                        help="refit payload coalesce_mib values to run per pair (0: megatron-core's NCCL service)")
    parser.add_argument("--coalesce-overlap", choices=sorted(OVERLAP_CHOICES), default="both",
                        help="payload coalesce_overlap for coalesce sizes > 0: on, off, or both (each size twice, "
                             "run names _ov / _noov); with --profile the payload serializes the phases either way")
    parser.add_argument("--executor", choices=sorted(EXECUTOR_CHOICES), default="megatron",
                        help="payload executor for coalesce sizes > 0: megatron (swap_model_weights every refit), "
                             "replay (after the first refit, megatron-core's cached plan replayed by the coalescing "
                             "service, run names _rp), both (each coalesce size with each), or compare (the "
                             "payload's executor \"both\": Megatron-Core's own service for the transport and replay "
                             "in one job, next to the plan's own exchange ceiling, every transport, run names _vs)")
    parser.add_argument("--coalesce-schedule", nargs="+", choices=SCHEDULE_CHOICES, default=["rounds"],
                        help="payload coalesce_schedule values for coalesce sizes > 0, each run side by side: rounds "
                             "(bucket i to every peer at once) and/or pairwise (one peer pair per step, run names "
                             "_pw); rows carry coalesce_schedule")
    parser.add_argument("--coalesce-edge-mib", type=int, nargs="+", default=[0],
                        help="payload coalesce_edge_mib values for coalesce sizes > 0 (only those below the size), "
                             "each run side by side: the first and last message per peer at most this many MiB "
                             "(0: as large as the others; run names _e<mib>); rows carry coalesce_edge_mib")
    parser.add_argument("--p2p-sizes-mib", type=int, nargs="+", default=list(EXCHANGE_SIZES_MIB))
    parser.add_argument("--p2p-batched-op-mib", type=int, nargs="+", default=list(BATCHED_OP_MIB))
    parser.add_argument("--p2p-only", action="store_true", help="measure the ceiling, run no refit")
    parser.add_argument("--p2p-device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu = gloo on this host's CPU, only to test the code path (no GPU numbers)")
    parser.add_argument("--ceiling-json", type=Path, help="p2p rows of an earlier run of this script (--skip-p2p)")
    parser.add_argument("--no-fallback", action="store_true", help="do not retry a failed multi-layer run with 1")
    parser.add_argument("--dry-run", action="store_true", help="print the refit configs and the p2p plan; no GPU")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.world < 2:
        print("error: --world must be >= 2 (refit and p2p need two GPUs)", file=sys.stderr)
        return 2
    if args.dry_run:
        from cloudai_mbridge.payload.refit.config import ConfigError, derive_layouts, from_dict

        for pair, transport, c, ov, ex, sc, e in refit_runs(args):
            cfg = refit_config(pair, args.layers, args, c, transport, ov, ex, sc, e)
            try:
                derive_layouts(from_dict(cfg), args.world)
                check = "layout ok"
            except ConfigError as exc:
                check = f"LAYOUT REFUSED: {exc}"
            name = run_name(pair, args.layers, transport, c, ov, ex, sc, e)
            print(f"refit {name} ({check}): {json.dumps(cfg, sort_keys=True)}")
        print(f"p2p plan: {json.dumps(p2p_plan(args.world, args.p2p_sizes_mib, args.p2p_batched_op_mib))}")
        return 0
    if not (args.p2p_device == "cpu" and args.p2p_only):
        require_gpu(__file__, args.world, () if args.p2p_only else ("megatron.core",))
    args.out.mkdir(parents=True, exist_ok=True)
    info = provenance([f"benchmarks/{Path(__file__).name}", *argv])
    print(f"device: {info.get('gpus')} torch {info.get('torch')} cuda {info.get('cuda')} nccl {info.get('nccl')} "
          f"megatron-core {info.get('megatron_core')}", flush=True)
    print("method: p2p = batch_isend_irecv between ring neighbours, bf16 random data, slowest rank's host time "
          f"(barrier+sync around), {args.p2p_warmup} warm-up + {args.p2p_reps} timed reps, median; refit = payload "
          f"refit.py, collocated, nccl, warmup {args.warmup}, {args.iterations} timed, verify on; GB = 1e9 B",
          flush=True)
    result: dict = {"experiment": "gpu_refit_nccl", "provenance": info, "p2p": [], "refit": []}

    p2p: list[dict] = []
    if not args.skip_p2p:
        try:
            p2p = measure_p2p(args.world, args.p2p_warmup, args.p2p_reps, args.out,
                              p2p_plan(args.world, args.p2p_sizes_mib, args.p2p_batched_op_mib), args.p2p_device)
            print_p2p(p2p)
        except Exception as exc:
            print(f"p2p measurement failed: {type(exc).__name__}: {exc}", flush=True)
            result["p2p_error"] = f"{type(exc).__name__}: {exc}"
    elif args.ceiling_json and args.ceiling_json.is_file():
        p2p = json.loads(args.ceiling_json.read_text()).get("p2p", [])
    result["p2p"] = p2p
    single = [r for r in p2p if r["mode"] == "exchange" and r["ops"] == 1]
    ceiling = max(single, key=lambda r: r["bytes"]) if single else None
    total = max((r["bytes"] for r in p2p), default=0)
    batched = [r for r in p2p if r["mode"] == "exchange" and r["bytes"] == total]

    runs = [] if args.p2p_only else refit_runs(args)
    for pair, transport, coalesce, overlap, executor, schedule, edge in runs:
        try:
            row = run_refit(pair, args.layers, args, args.out, coalesce, transport, overlap, executor, schedule, edge)
        except Exception as exc:  # one transport's failure must not stop the others
            row = {"name": run_name(pair, args.layers, transport, coalesce, overlap, executor, schedule, edge),
                   "pair": pair, "layers": args.layers, "transport": transport, "coalesce_mib": coalesce,
                   "coalesce_overlap": overlap, "executor": executor,
                   "coalesce_schedule": schedule if coalesce else None, "coalesce_edge_mib": edge,
                   "status": "harness-error", "returncodes": [],
                   "verify": None, "median_ms": None, "wall_s": 0.0, "error": f"{type(exc).__name__}: {exc}",
                   "first_error": f"{type(exc).__name__}: {exc}"}
        if row["status"] != "ok" and args.layers > 1 and not args.no_fallback:
            print(f"{row['name']}: status {row['status']} rc {row['returncodes']} error {row.get('error')}; "
                  "retrying with 1 layer", flush=True)
            result["refit"].append(row)
            row = run_refit(pair, 1, args, args.out, coalesce, transport, overlap, executor, schedule, edge)
        derive(row, args.world, ceiling, batched)
        result["refit"].append(row)
        print(f"[{row['name']}] status={row['status']} verify={row['verify']} median_ms={row['median_ms']} "
              f"wall_s={row['wall_s']:.1f}" + (f" error={row.get('first_error')}" if row['status'] != "ok" else ""),
              flush=True)
        (args.out / "gpu_refit_nccl.json").write_text(json.dumps(result, indent=1, sort_keys=True))

    if p2p:
        print_p2p(p2p)
    print_refit(result["refit"])
    if ceiling:
        print(f"\nceiling: exchange {_size(ceiling['bytes'])} in one op = {ceiling['gbps_per_gpu']:.1f} GB/s per GPU "
              f"({ceiling['gibps_per_gpu']:.1f} GiB/s), spread {ceiling['spread_pct']:.1f} %")
        print(f"RESULT p2p_ceiling_exchange_{ceiling['bytes'] // MIB}mib_per_gpu={ceiling['gbps_per_gpu']:.1f} GB/s")
        for r in single:
            print(f"RESULT p2p_exchange_{r['bytes'] // MIB}mib_per_gpu={r['gbps_per_gpu']:.1f} GB/s")
        for r in batched:
            if r["ops"] > 1:
                print(f"RESULT p2p_batched_{r['op_bytes'] // MIB}mib_ops_per_gpu={r['gbps_per_gpu']:.1f} GB/s")
    failed = False
    for r in result["refit"]:
        tag = f"{r['pair'].replace('-', '_to_')}_{r['layers']}l" + (
            f"_coalesce{r['coalesce_mib']}mib{overlap_suffix(r.get('coalesce_overlap'))}"
            f"{executor_suffix(r.get('executor'))}{schedule_suffix(r.get('coalesce_schedule'))}"
            f"{edge_suffix(r.get('coalesce_edge_mib'))}"
            if r.get("coalesce_mib") else "")
        prefix = f"refit_{r.get('transport', 'nccl')}_{tag}"
        if r.get("median_ms") is None:
            failed = True
            print(f"RESULT {prefix}_status={r['status']}")
            continue
        if r.get("drift_pct") is not None:
            print(f"RESULT {prefix}_first_iter_ms={r['first_ms']:.2f} ms")
            print(f"RESULT {prefix}_last_iter_ms={r['last_ms']:.2f} ms")
            print(f"RESULT {prefix}_drift_pct={r['drift_pct']:.1f} %")
        for k, v in (r.get("phases") or {}).items():
            print(f"RESULT {prefix}_phase_{k}={v:.2f} ms")
        print(f"RESULT {prefix}_median_ms={r['median_ms']:.2f} ms")
        print(f"RESULT {prefix}_spread_ms={r['max_ms'] - r['min_ms']:.2f} ms")
        print(f"RESULT {prefix}_payload_bandwidth={r['payload_bandwidth_gbps']:.1f} GB/s")
        print(f"RESULT {prefix}_remote_per_gpu={r.get('remote_gbps_per_gpu', float('nan')):.1f} GB/s")
        print(f"RESULT {prefix}_moved_per_gpu={r.get('moved_gbps_per_gpu', float('nan')):.1f} GB/s")
        if "pct_of_p2p" in r:
            print(f"RESULT {prefix}_pct_of_p2p={r['pct_of_p2p']:.1f} %")
        if "pct_of_batched" in r:
            print(f"RESULT {prefix}_pct_of_batched_p2p={r['pct_of_batched']:.1f} %")
        for line in paths_results(prefix, r.get("paths")):
            print(line)
        print(f"RESULT {prefix}_verify={r['verify']}")
        failed |= r["verify"] != "pass"
    (args.out / "gpu_refit_nccl.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return 1 if failed else 0


def paths_results(prefix: str, p: dict | None) -> list[str]:
    """RESULT lines of one executor-"both" row: per path its median, n and % of both ceilings; the speed-up."""
    if not p:
        return []
    out = []
    for path in ("megatron", "ours"):
        if p.get(f"{path}_median_ms") is None:
            continue
        out.append(f"RESULT {prefix}_{path}_median_ms={p[f'{path}_median_ms']:.2f} ms")
        out.append(f"RESULT {prefix}_{path}_n={p[f'{path}_n']}")
        if p.get(f"{path}_pct_of_p2p") is not None:
            out.append(f"RESULT {prefix}_{path}_pct_of_p2p={p[f'{path}_pct_of_p2p']:.1f} %")
        if p.get(f"{path}_pct_of_ceiling") is not None:
            out.append(f"RESULT {prefix}_{path}_pct_of_plan_ceiling={p[f'{path}_pct_of_ceiling']:.1f} %")
    if p.get("speedup") is not None:
        lo, hi = p["speedup_ci95"]
        out.append(f"RESULT {prefix}_speedup={p['speedup']:.3f} x")
        out.append(f"RESULT {prefix}_speedup_ci95={lo:.3f}..{hi:.3f} x")
    out.append(f"RESULT {prefix}_speedup_verdict={str(p.get('speedup_verdict')).replace(' ', '_')}")
    return out


if __name__ == "__main__":
    sys.exit(main())
