"""The harness's own cost: the training payload (engine "bridge") against Megatron-Bridge's own pretrain() with the
same recipe and overrides (benchmarks/plain_bridge.py), on one GPU, same point, same iterations.

Method. One TrainingPlan (``--model``, 1 GPU, tp = pp = ep = 1, mbs 1, gbs 4, seq 4096, bf16, mock data, alltoall,
seed 1234) gives one mbridge_config.json; each of ``--starts`` starts runs both arms as fresh processes, the order
alternating (payload first in even starts, plain first in odd) so that a drift of the host falls on both. Each run is
a run folder (``<out>/runs/<arm>_s<k>/``) read back with parse_training_run: Bridge's own iteration lines, the first
``--warmup`` iterations dropped, the manual-GC iterations kept in both arms (the recipe collects in both alike).
Overhead = (payload - plain) / plain x 100 of the mean of the starts' steady-state means, with the two-level
bootstrap interval of reports/ab_starts.py (starts, then iterations). Also: wall seconds per run and seconds outside
the iterations (start-up), per arm.

Run (GPU host with the bridge stack, benchmarks/gpu_setup.sh):
    python3 benchmarks/payload_overhead.py --out /tmp/overhead [--starts 3] [--iters 20] [--budget-s 540]
    python3 benchmarks/payload_overhead.py --dry-run           the plan and the config; no GPU
    python3 benchmarks/payload_overhead.py --report <out>      the numbers again from the run folders
Prints ``RESULT payload_overhead_pct=<x> %`` (with its interval), ``RESULT payload_startup_extra_s=<x> s``; writes
``<out>/payload_overhead.json``. Goal (issue 29): overhead <= 1 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from provenance import gpu_problem, provenance  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudai_mbridge.catalog import get_gpu, get_model  # noqa: E402
from cloudai_mbridge.launch.training import training_config  # noqa: E402
from cloudai_mbridge.plan import TrainingPlan  # noqa: E402

ARMS = {"payload": "cloudai_mbridge.payload.train", "plain": "benchmarks.plain_bridge"}


def make_config(args: argparse.Namespace, output_dir: str) -> dict[str, Any]:
    plan = TrainingPlan(
        model=get_model(args.model), gpu=get_gpu(args.gpu), num_nodes=1, gpus_per_node=1, tp=1, pp=1, cp=1, ep=1,
        etp=1, mbs=1, gbs=4, seq_length=args.seq, train_iters=args.iters, dispatcher="alltoall", recompute="none",
        precision="bf16", force_balanced_routing=True, sequence_parallel=False, use_distributed_optimizer=True,
        optimizer="adam", transformer_impl="transformer_engine", bridge_version="0.6",
    )
    return training_config(plan, data="mock", seed=1234, log_interval=1, engine="bridge", output_dir=output_dir,
                           checkpoint_dir=None, hf_model_id=None, use_distributed_optimizer=True)


def run_arm(arm: str, start: int, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    from cloudai_mbridge.payload.refit.local import launch

    folder = args.out / "runs" / f"{arm}_s{start}"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    cfg = make_config(args, str(folder))
    (folder / "mbridge_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    began = time.perf_counter()
    run = launch(cfg, 1, timeout=timeout_s, module=ARMS[arm], cwd=ROOT, env={"PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - began
    (folder / "logs" / "rank-0.log").write_text(run.stdout[0] + run.stderr[0])
    return {"arm": arm, "start": start, "run_folder": str(folder), "returncode": run.returncodes[0],
            "wall_s": round(wall, 1)}


def measure(rows: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    from cloudai_mbridge.metrics import parse_training_run
    from cloudai_mbridge.reports import ab_starts

    series: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    outside: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for r in rows:
        m = parse_training_run(r["run_folder"], warmup=warmup)
        r["status"] = m.status
        times = [] if m.time_errors else ab_starts.start_times(
            [(i.iteration, i.elapsed_ms) for i in m.iterations], set(m.steady_iterations), set())
        r["steady_mean_ms"] = sum(times) / len(times) if times else None
        r["outside_iterations_s"] = round(r["wall_s"] - sum(i.elapsed_ms or 0.0 for i in m.iterations) / 1000, 1)
        if m.ok and times:
            series[r["arm"]].append(times)
            outside[r["arm"]].append(r["outside_iterations_s"])
    result: dict[str, Any] = {"starts": {a: len(s) for a, s in series.items()}}
    boot = ab_starts.bootstrap_delta(series["plain"], series["payload"])
    if boot is not None:
        result.update(overhead_pct=boot[0], interval_pct=[boot[1], boot[2]],
                      payload_ms=ab_starts.arm_time(series["payload"]), plain_ms=ab_starts.arm_time(series["plain"]))
    if outside["payload"] and outside["plain"]:
        result["startup_extra_s"] = (sum(outside["payload"]) / len(outside["payload"])
                                     - sum(outside["plain"]) / len(outside["plain"]))
    return result


def report(rows: list[dict[str, Any]], result: dict[str, Any]) -> None:
    print("runs: steady-state mean per start (ms, warm-up dropped, GC iterations kept in both arms), wall and "
          "start-up seconds")
    for r in rows:
        mean = r.get("steady_mean_ms")
        print(f"  {r['arm']:>7} s{r['start']} {r.get('status', '?'):>16} "
              f"{'-' if mean is None else f'{mean:.1f}':>8} ms  wall {r['wall_s']} s  "
              f"outside iterations {r.get('outside_iterations_s')} s")
    if "overhead_pct" not in result:
        print("no overhead: an arm has no start with steady-state iterations")
        return
    lo, hi = result["interval_pct"]
    print(f"payload {result['payload_ms']:.1f} ms vs plain Bridge {result['plain_ms']:.1f} ms per iteration "
          f"({result['starts']['payload']} + {result['starts']['plain']} starts): {result['overhead_pct']:+.2f} % "
          f"(95 % bootstrap interval {lo:+.2f}..{hi:+.2f} %)")
    print(f"RESULT payload_overhead_pct={result['overhead_pct']:.2f} %")
    print(f"RESULT payload_overhead_ci95_pct={lo:.2f}..{hi:.2f} %")
    if "startup_extra_s" in result:
        print(f"RESULT payload_startup_extra_s={result['startup_extra_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--report", type=Path, metavar="OUT")
    parser.add_argument("--model", default="deepseek_v3_proxy", choices=["deepseek_v3_proxy", "kimi_k2_proxy"])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--budget-s", type=float)
    parser.add_argument("--min-run-s", type=float, default=90.0)
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads((args.report / "payload_overhead.json").read_text())
        rows = saved["runs"]
        for r in rows:
            r["run_folder"] = str(args.report / "runs" / Path(r["run_folder"]).name)
        result = measure(rows, args.warmup)
        report(rows, result)
        return 0 if "overhead_pct" in result else 1
    if args.dry_run:
        cfg = make_config(args, "<out>/runs/<arm>_s<k>")
        print(f"plan: {args.model} on 1 x {args.gpu}, mbs 1, gbs 4, seq {args.seq}, {args.iters} iterations, "
              f"{args.starts} starts x {', '.join(ARMS)} (alternating order)")
        print(json.dumps(cfg, sort_keys=True))
        return 0
    if args.out is None:
        parser.error("--out is required unless --dry-run or --report")
    problem = gpu_problem(1)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for start in range(args.starts):
        order = list(ARMS) if start % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            timeout = args.timeout_s
            if args.budget_s is not None:
                left = args.budget_s - (time.perf_counter() - began)
                if left < args.min_run_s:
                    print(f"[{arm}_s{start}] skipped: {left:.0f} s left of --budget-s {args.budget_s:.0f}")
                    continue
                timeout = min(timeout, left - 10)
            row = run_arm(arm, start, args, timeout)
            rows.append(row)
            print(f"[{arm}_s{start}] rc={row['returncode']} wall_s={row['wall_s']}", flush=True)
    result = measure(rows, args.warmup)
    report(rows, result)
    out = {"experiment": "payload_overhead", "provenance": provenance([f"benchmarks/{Path(__file__).name}", *(argv or
           sys.argv[1:])]), "settings": {k: str(v) for k, v in vars(args).items()}, "runs": rows, "result": result}
    (args.out / "payload_overhead.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    return 0 if "overhead_pct" in result else 1


if __name__ == "__main__":
    sys.exit(main())
