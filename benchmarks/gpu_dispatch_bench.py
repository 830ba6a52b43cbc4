"""The dispatch/combine microbenchmark on every GPU of this host, for every arm, at the training A/B's shapes.

Method. Per (model, mbs, arm) point: the config the CloudAI test MBridgeDispatchBench would write
(workloads/dispatch_bench, shapes from the model catalog), checked by that test's rules (a rejected point is printed
with its rule and not run), written to ``<out>/runs/<model>_mbs<m>_<arm>/mbridge_config.json``; then one rank per
GPU of the payload ``cloudai_mbridge.payload.dispatch_bench`` (torchrun-style variables, payload/refit/local.py
launch), each rank's output in ``logs/rank-<R>.log``; then metrics/dispatch_bench.py reads rank 0's log (no number
from a damaged or partial log). What a call is, how it is timed and how bytes are counted: payload/dispatch_bench/
lines.py. Units: µs per call (median, p10, p90 over the timed calls, the slowest rank per call), GB/s = 1e9 B/s.

Output: a ``RESULT dispatch_bench ...`` line per phase of each point that ran whole, a ``RESULT dispatch_bench ...
status=<why>`` line for one that did not, ``RESULT dispatch_bench_points=<n> count`` (points with numbers), and
``<out>/gpu_dispatch_bench.json``. With ``--training-runs`` (run folders of the training A/B, e.g.
benchmarks/results/bridge_ab_4gpu/k2_mbs1_w5/runs/*) the A/B page is written to ``<out>/report/`` with the
microbenchmark beside the training delta (reports/ab.py). ``--report <out>`` redoes the lines and the page from an
earlier run's folders. ``--dry-run`` prints the grid and the configs without starting anything.

Exit status: 0 when the lines were written; 2 for a usage problem; 3, with one line, on a host without a CUDA GPU (or
fewer than ``--gpus``) or without megatron-core, before anything is written. ``--dry-run`` and ``--report`` need
neither.

usage: python3 benchmarks/gpu_dispatch_bench.py --out DIR [--models M ...] [--arms A ...] [--mbs N ...]
       [--gpus N] [--warmup W] [--iterations I] [--uccl-dir .whl/uccl] [--timeout-s S] [--budget-s S]
       [--training-runs DIR ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

ARMS = ("alltoall", "deepep", "ncclep")
MODELS = ("deepseek_v3_proxy", "kimi_k2_proxy")


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def points(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (model, mbs, arm) with its config and the rules' verdict, as the CloudAI test MBridgeDispatchBench makes
    them (plan/ and rules/dispatch_bench.py, no CloudAI needed on the GPU host)."""
    from cloudai_mbridge.plan.dispatch_bench import bench_config
    from cloudai_mbridge.rules.dispatch_bench import bench_violations

    out = []
    for model in args.models:
        for mbs in args.mbs:
            for arm in args.arms:
                config = bench_config(model=model, dispatcher=arm, seq_length=args.seq, mbs=mbs, warmup=args.warmup,
                                      iterations=args.iterations, dtype="bf16", capacity_factor=args.capacity_factor,
                                      deepep_impl=args.deepep_impl, seed=args.seed, ranks=args.gpus)
                rejected = [str(v) for v in bench_violations(config, args.capacity_factor, args.deepep_impl)]
                out.append({"name": f"{model}_mbs{mbs}_{arm}", "model": model, "mbs": mbs, "arm": arm,
                            "rejected": rejected, "config": config})
    return out


def child_env(args: argparse.Namespace) -> dict[str, str]:
    from gpu_dispatcher_ab import NO_MULTICAST, uccl_env

    env = {"PYTHONUNBUFFERED": "1", **{k: os.environ.get(k, v) for k, v in NO_MULTICAST.items()}}
    if args.uccl_dir is not None:
        added, notes = uccl_env(args.uccl_dir, os.environ)
        env.update(added)
        for note in notes:
            print(f"uccl: {note}", flush=True)
    return env


def run_point(p: dict[str, Any], args: argparse.Namespace, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    from cloudai_mbridge.payload.refit.local import launch

    folder = args.out / "runs" / p["name"]
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "mbridge_config.json").write_text(json.dumps(p["config"], indent=2, sort_keys=True) + "\n")
    start = time.perf_counter()
    run = launch(p["config"], p["config"]["world_size"], timeout=timeout_s,
                 module="cloudai_mbridge.payload.dispatch_bench", cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    for rank, (stdout, stderr) in enumerate(zip(run.stdout, run.stderr, strict=True)):
        (folder / "logs" / f"rank-{rank}.log").write_text(stdout + stderr)
    return {"run_folder": str(folder), "returncodes": run.returncodes, "wall_s": round(wall, 1)}


def result_lines(folder: Path) -> tuple[list[str], dict[str, Any]]:
    """RESULT lines of one run folder, from its rank-0 log through metrics/dispatch_bench.py."""
    from cloudai_mbridge.metrics.dispatch_bench import parse_dispatch_run

    config = json.loads((folder / "mbridge_config.json").read_text())
    m = parse_dispatch_run(folder, config.get("dispatcher"))
    head = (f"RESULT dispatch_bench model={config.get('model')} mbs={config.get('mbs')} "
            f"tokens_per_rank={config.get('seq_length', 0) * config.get('mbs', 0)} ranks={config.get('world_size')} "
            f"backend={config.get('dispatcher')}")
    summary = {"folder": str(folder), "status": m.status, "error": m.error, "phases": {}}
    if m.status != "ok":
        return [f"{head} status={m.status} error={json.dumps(m.error)}"], summary
    out = []
    for phase, r in m.phases.items():
        summary["phases"][phase] = r.__dict__
        out.append(f"{head} phase={phase} median_us={r.median_us:.1f} p10_us={r.p10_us:.1f} p90_us={r.p90_us:.1f} "
                   f"algbw_gbps={r.algbw_gbps:.2f} busbw_gbps={r.busbw_gbps:.2f} calls={r.calls} status=ok us/call")
    return out, summary


def report(args: argparse.Namespace) -> int:
    folders = sorted(p.parent for p in (args.out / "runs").glob("*/mbridge_config.json"))
    summaries, ok = [], 0
    for folder in folders:
        lines, summary = result_lines(folder)
        for line in lines:
            print(line, flush=True)
        summaries.append(summary)
        ok += summary["status"] == "ok"
    print(f"RESULT dispatch_bench_points={ok} count (of {len(folders)} run)", flush=True)
    (args.out / "gpu_dispatch_bench.json").write_text(json.dumps(summaries, indent=2) + "\n")
    training = [Path(p) for p in args.training_runs or []]
    if training:
        run_dirs = [p for p in training if (p / "mbridge_config.json").is_file()] + folders
        try:
            from cloudai_mbridge.reports.folders import ab_report

            rows = ab_report(run_dirs, args.out / "report", warmup=args.report_warmup, name="gpu_dispatch_bench")
            print(f"report: {args.out / 'report' / 'mbridge_ab.html'} ({len(rows)} A/B rows)", flush=True)
        except ImportError as exc:  # the GPU host has no CloudAI: the run folders are all the page needs
            print(f"A/B page not made here ({type(exc).__name__}: {exc}); on a machine with CloudAI: python3 "
                  "benchmarks/gpu_dispatch_bench.py --report --out <unpacked dispatch_runs.tgz> --training-runs "
                  "<training run folders>", flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--mbs", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--gpus", type=int, default=None, help="default: nvidia-smi -L")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--deepep-impl", choices=("uccl", "nvidia"), default="uccl")
    ap.add_argument("--capacity-factor", type=float, default=1.5, help="ncclep's, as in training")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--uccl-dir", type=Path, default=None)
    ap.add_argument("--timeout-s", type=float, default=240.0, help="per point")
    ap.add_argument("--budget-s", type=float, default=None, help="start no point after this many seconds")
    ap.add_argument("--training-runs", nargs="*", default=None)
    ap.add_argument("--report-warmup", type=int, default=4)
    ap.add_argument("--report", action="store_true", help="only redo the lines and the page from --out's runs")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.report:
        return report(args)
    if not args.dry_run:
        from provenance import NO_GPU_EXIT, require_gpu

        require_gpu(__file__, args.gpus or 1, ("megatron.core",))
    args.gpus = args.gpus or gpu_count()
    if args.gpus < 1 and not args.dry_run:
        print(f"error: {Path(__file__).name}: nvidia-smi -L lists no GPU: run it on a GPU host (--gpus N --dry-run "
              "needs none)", file=sys.stderr)
        return NO_GPU_EXIT
    args.gpus = max(args.gpus, 1)
    grid = points(args)
    print(f"grid: {len(grid)} points = models {args.models} x mbs {args.mbs} x arms {args.arms}, {args.gpus} GPUs "
          f"(ep {args.gpus}), seq {args.seq}, {args.warmup} warm-up + {args.iterations} timed calls per point",
          flush=True)
    for p in grid:
        verdict = "reject " + "; ".join(p["rejected"]) if p["rejected"] else "run"
        print(f"  {p['name']:>32} {verdict}", flush=True)
        if args.dry_run and not p["rejected"]:
            print(f"  {'':>32} config: {json.dumps(p['config'], sort_keys=True)}", flush=True)
    if args.dry_run:
        return 0
    env = child_env(args)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for p in grid:
        if p["rejected"]:
            continue
        left = None if args.budget_s is None else args.budget_s - (time.monotonic() - start)
        if left is not None and left < 30:
            print(f"skipped {p['name']}: {left:.0f} s of budget left", flush=True)
            continue
        timeout = args.timeout_s if left is None else min(args.timeout_s, left)
        done = run_point(p, args, env, timeout)
        print(f"ran {p['name']}: exit {done['returncodes']} in {done['wall_s']} s", flush=True)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
