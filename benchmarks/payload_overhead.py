"""The harness's own cost: the training payload (engine "bridge") against Megatron-Bridge's own pretrain() with the
same recipe and overrides (benchmarks/plain_bridge.py), on one GPU, same point, same iterations.

Method. One TrainingPlan (``--model``, 1 GPU, tp = pp = ep = 1, mbs 1, gbs 4, seq 4096, bf16, mock data, alltoall,
seed 1234) gives one mbridge_config.json; each of ``--starts`` starts runs every arm of ``--arms`` as a fresh
process, the order rotated by one arm per start (each arm takes each place in turn) so that a drift of the host falls
on all. Arms: ``payload`` (the training payload as a job runs it), ``plain`` (Bridge's pretrain(), the reference) and
``payload_nohash`` (the payload with MBRIDGE_ROUTING_HASH=0: without the routing-hash callback, whose ``.item()``
synchronises the host with the GPU after every step) and ``payload_notiming`` (MBRIDGE_DISPATCH_TIMING=0: without
the dispatcher timer of payload/train/dispatch_timing.py; payload minus payload_notiming is the timer's own cost,
issue 43 item 5). Each run is a run folder (``<out>/runs/<arm>_s<k>/``) read
back with parse_training_run: Bridge's own iteration lines, the first ``--warmup`` iterations dropped. Two views: the
manual-GC iterations kept in every arm (the recipe collects in all alike), and left out of every arm (the iterations
the payload's ``MBRIDGE_GC`` line names; plain Bridge prints no such line but runs the same recipe). Overhead of an
arm = (arm - plain) / plain x 100 of the mean of the starts' steady-state means, with the two-level bootstrap
interval of reports/ab_starts.py (starts, then iterations). Also: wall seconds per run and seconds outside the
iterations (start-up), per arm. An ``--out`` that already holds a payload_overhead.json from the same machine (the
GPU's UUID; the host name where nvidia-smi gave none) and the same model, GPU, sequence and iterations takes the new
starts beside the old ones, numbered on: several device calls on one warm host add up to one record; a record from
another machine or point is refused.

Run (GPU host with the bridge stack, benchmarks/gpu_setup.sh):
    python3 benchmarks/payload_overhead.py --out /tmp/overhead [--starts 3]
        [--arms payload plain payload_nohash payload_notiming]
        [--iters 20] [--budget-s 540]
    python3 benchmarks/payload_overhead.py --dry-run           the plan and the config; no GPU
    python3 benchmarks/payload_overhead.py --report <out> [--plot]   the numbers again from the run folders (and a
                                                                      plot of every start, <out>/payload_overhead.png)
Prints ``RESULT payload_overhead_pct=<x> %`` and ``RESULT payload_overhead_no_gc_pct=<x> %`` (each with its
interval), the same for ``payload_nohash`` when it ran, ``RESULT payload_startup_extra_s=<x> s``; writes
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

ARMS = {"payload": "cloudai_mbridge.payload.train", "plain": "benchmarks.plain_bridge",
        "payload_nohash": "cloudai_mbridge.payload.train", "payload_notiming": "cloudai_mbridge.payload.train"}
ARM_ENV = {"payload_nohash": {"MBRIDGE_ROUTING_HASH": "0"}, "payload_notiming": {"MBRIDGE_DISPATCH_TIMING": "0"}}
BASE = "plain"
SAME_POINT = ("model", "gpu", "seq", "iters")  # settings an added start must share with the record it joins


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
    run = launch(cfg, 1, timeout=timeout_s, module=ARMS[arm], cwd=ROOT,
                 env={"PYTHONUNBUFFERED": "1", **ARM_ENV.get(arm, {})})
    wall = time.perf_counter() - began
    (folder / "logs" / "rank-0.log").write_text(run.stdout[0] + run.stderr[0])
    return {"arm": arm, "start": start, "run_folder": str(folder), "returncode": run.returncodes[0],
            "wall_s": round(wall, 1)}


def measure(rows: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Per arm: the steady-state series of each start, GC iterations kept and left out; each arm against plain."""
    from cloudai_mbridge.metrics import parse_training_run
    from cloudai_mbridge.reports import ab_starts

    parsed = []
    gc: set[int] = set()
    for r in rows:
        m = parse_training_run(r["run_folder"], warmup=warmup)
        parsed.append(m)
        gc.update(m.gc_iterations)  # only the payload arms print MBRIDGE_GC; the recipe is the same in every arm
    arms = sorted({r["arm"] for r in rows}, key=list(ARMS).index)
    series: dict[str, dict[str, list[list[float]]]] = {view: {a: [] for a in arms} for view in ("gc_in", "gc_out")}
    outside: dict[str, list[float]] = {a: [] for a in arms}
    for r, m in zip(rows, parsed, strict=True):
        r["status"] = m.status
        its = [(i.iteration, i.elapsed_ms) for i in m.iterations]
        views = {"gc_in": [] if m.time_errors else ab_starts.start_times(its, set(m.steady_iterations), set()),
                 "gc_out": [] if m.time_errors else ab_starts.start_times(its, set(m.steady_iterations), gc)}
        r["steady_mean_ms"] = sum(views["gc_in"]) / len(views["gc_in"]) if views["gc_in"] else None
        r["steady_mean_no_gc_ms"] = sum(views["gc_out"]) / len(views["gc_out"]) if views["gc_out"] else None
        r["outside_iterations_s"] = round(r["wall_s"] - sum(i.elapsed_ms or 0.0 for i in m.iterations) / 1000, 1)
        if m.ok and views["gc_in"]:
            for view, times in views.items():
                series[view][r["arm"]].append(times)
            outside[r["arm"]].append(r["outside_iterations_s"])
    result: dict[str, Any] = {"starts": {a: len(series["gc_in"][a]) for a in arms}, "gc_iterations": sorted(gc),
                              "arms": {}}
    for arm in arms:
        if arm == BASE or BASE not in arms:
            continue
        entry: dict[str, Any] = {}
        for view in ("gc_in", "gc_out"):
            boot = ab_starts.bootstrap_delta(series[view][BASE], series[view][arm])
            if boot is not None:
                entry[view] = {"overhead_pct": boot[0], "interval_pct": [boot[1], boot[2]],
                               "arm_ms": ab_starts.arm_time(series[view][arm]),
                               "plain_ms": ab_starts.arm_time(series[view][BASE])}
        if outside[arm] and outside[BASE]:
            entry["startup_extra_s"] = (sum(outside[arm]) / len(outside[arm])
                                        - sum(outside[BASE]) / len(outside[BASE]))
        result["arms"][arm] = entry
    return result


def report(rows: list[dict[str, Any]], result: dict[str, Any]) -> None:
    print("runs: steady-state mean per start (ms, warm-up dropped; GC iterations kept | left out), wall and start-up "
          "seconds")
    for r in rows:
        means = [r.get("steady_mean_ms"), r.get("steady_mean_no_gc_ms")]
        shown = " | ".join("-" if m is None else f"{m:.1f}" for m in means)
        print(f"  {r['arm']:>14} s{r['start']} {r.get('status', '?'):>16} {shown:>15} ms  wall {r['wall_s']} s  "
              f"outside iterations {r.get('outside_iterations_s')} s")
    print(f"manual-GC iterations (from the payload's MBRIDGE_GC line): {result.get('gc_iterations') or 'none'}")
    found = False
    for arm, entry in result.get("arms", {}).items():
        for view, words in (("gc_in", "GC iterations kept"), ("gc_out", "GC iterations left out")):
            if view not in entry:
                continue
            found = True
            e = entry[view]
            lo, hi = e["interval_pct"]
            print(f"{arm} {e['arm_ms']:.1f} ms vs plain Bridge {e['plain_ms']:.1f} ms per iteration, {words} "
                  f"({result['starts'][arm]} + {result['starts'][BASE]} starts): {e['overhead_pct']:+.2f} % "
                  f"(95 % bootstrap interval {lo:+.2f}..{hi:+.2f} %)")
            tag = "" if view == "gc_in" else "_no_gc"
            name = "payload_overhead" if arm == "payload" else f"{arm}_overhead"
            print(f"RESULT {name}{tag}_pct={e['overhead_pct']:.2f} %")
            print(f"RESULT {name}{tag}_ci95_pct={lo:.2f}..{hi:.2f} %")
        if "startup_extra_s" in entry:
            name = "payload" if arm == "payload" else arm
            print(f"RESULT {name}_startup_extra_s={entry['startup_extra_s']:.1f} s")
    if not found:
        print("no overhead: plain or every other arm has no start with steady-state iterations")


def plot(rows: list[dict[str, Any]], result: dict[str, Any], path: Path, title: str) -> None:
    """Each start's steady-state mean per arm (dots), the arm's mean of start means (bar), GC kept and left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, (key, words) in zip(axes, (("steady_mean_ms", "manual-GC iterations kept"),
                                       ("steady_mean_no_gc_ms", "manual-GC iterations left out")), strict=True):
        for x, arm in enumerate(arms):
            ys = [r[key] for r in rows if r["arm"] == arm and r.get(key) is not None]
            ax.scatter([x] * len(ys), ys, s=22, zorder=3, label="one start" if x == 0 else None)
            if ys:
                ax.hlines(sum(ys) / len(ys), x - 0.3, x + 0.3, colors="black", zorder=4,
                          label="mean of starts" if x == 0 else None)
            entry = result.get("arms", {}).get(arm, {}).get("gc_in" if key == "steady_mean_ms" else "gc_out")
            if entry:
                lo, hi = entry["interval_pct"]
                ax.annotate(f"{entry['overhead_pct']:+.1f} %\n[{lo:+.1f} .. {hi:+.1f}]", (x, max(ys)),
                            textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
        ax.set_xticks(range(len(arms)), [f"{a}\n({sum(r['arm'] == a for r in rows)} starts)" for a in arms])
        ax.set_title(words, fontsize=10)
        ax.set_xlabel("arm (change vs plain Bridge, 95 % bootstrap interval)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("steady-state mean iteration time per start (ms)")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def has_overhead(result: dict[str, Any]) -> bool:
    return any(entry.get("gc_in") for entry in result.get("arms", {}).values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--report", type=Path, metavar="OUT")
    parser.add_argument("--plot", action="store_true", help="with --report: <OUT>/payload_overhead.png")
    parser.add_argument("--model", default="deepseek_v3_proxy", choices=["deepseek_v3_proxy", "kimi_k2_proxy"])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--starts", type=int, default=3, help="starts to run now (added to any in --out)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=["payload", "plain"],
                        help="arms to run in every start (plain, the reference, is always among them)")
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
        if args.plot and has_overhead(result):
            gpus = ", ".join(saved.get("provenance", {}).get("gpus") or ["GPU ?"])
            plot(rows, result, args.report / "payload_overhead.png",
                 f"Payload vs plain Megatron-Bridge pretrain(): {saved['settings'].get('model')}, 1 x {gpus}, "
                 f"{saved['settings'].get('iters')} iterations per start")
            print(f"plot: {args.report / 'payload_overhead.png'}")
        return 0 if has_overhead(result) else 1
    if args.dry_run:
        cfg = make_config(args, "<out>/runs/<arm>_s<k>")
        print(f"plan: {args.model} on 1 x {args.gpu}, mbs 1, gbs 4, seq {args.seq}, {args.iters} iterations, "
              f"{args.starts} starts x {', '.join(arms_of(args))} (order rotated by one arm per start)")
        print(json.dumps(cfg, sort_keys=True))
        return 0
    if args.out is None:
        parser.error("--out is required unless --dry-run or --report")
    problem = gpu_problem(1)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    arms = arms_of(args)
    record = args.out / "payload_overhead.json"
    machine = machine_of(provenance([]))
    rows: list[dict[str, Any]] = []
    if record.exists():
        saved = json.loads(record.read_text())
        earlier = saved.get("settings", {})
        differs = [k for k in SAME_POINT if str(earlier.get(k)) != str(getattr(args, k))]
        was = machine_of(saved.get("provenance", {}))
        if was != machine or differs:
            print(f"error: {record} holds starts of another machine or point (GPUs {was} vs {machine}; differing "
                  f"settings: {differs or 'none'}): give a new --out", file=sys.stderr)
            return 2
        rows = saved["runs"]
        print(f"adding to {record}: {len(rows)} earlier runs")
    first = 1 + max((r["start"] for r in rows), default=-1)
    began = time.perf_counter()
    for start in range(first, first + args.starts):
        for arm in order_for(arms, start):
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
    tmp = record.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    tmp.replace(record)
    return 0 if has_overhead(result) else 1


def machine_of(prov: dict[str, Any]) -> Any:
    """Which machine a provenance record names: its GPUs' UUIDs (device hosts may all be called "vm"), else the
    host name."""
    return prov.get("gpu_uuids") or prov.get("host")


def order_for(arms: list[str], start: int) -> list[str]:
    """Start k runs the arms rotated by k: over len(arms) starts each arm takes each place once."""
    shift = start % len(arms)
    return arms[shift:] + arms[:shift]


def arms_of(args: argparse.Namespace) -> list[str]:
    """The arms to run, in ARMS order, with plain always among them."""
    return [a for a in ARMS if a in args.arms or a == BASE]


if __name__ == "__main__":
    sys.exit(main())
