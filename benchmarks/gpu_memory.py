"""Per-GPU memory: the rules' estimate (plan/memory.py) against the measured peak of the training payload on GPUs.

Method: for each config below a TrainingPlan is built from the catalog (model, H200) with the same settings the
payload gets; ``launch/training.py training_config(plan, ...)`` writes the payload's JSON (engine "mcore": the
Megatron-Core-only loop, local non-TE layer specs, Megatron DDP + its distributed optimizer, Adam, bf16, no
recompute, alltoall dispatcher, mock data). The payload runs as one process per GPU (``payload/refit_local.launch``,
torchrun-style variables, module ``cloudai_mbridge.payload.train``) for ``--iters`` iterations; its rank logs are
written as a run folder (``<out>/runs/<config>/mbridge_config.json`` + ``logs/rank-<R>.log``) and read back with
``cloudai_mbridge.metrics.parse_training_run``. Measured = the largest ``max allocated`` of the payload's Megatron
memory lines (``torch.cuda.max_memory_allocated``, printed after iterations 1 and 2, i.e. including the optimizer
state and a full step with it); also shown: ``allocated`` after iteration 2 (what stays: weights, gradients,
optimizer state) and ``max reserved``. Units: MiB (2^20 B), as Megatron prints them.

Device peak: nvidia-smi ``memory.used`` sampled every 100 ms in the background over each run, less the GPU's use
before it (the driver's view: CUDA context, NCCL buffers, allocator fragmentation included); the payload's
``MBRIDGE_DEVICE_MEMORY`` lines add ``mem_get_info`` used - ``memory_reserved`` (memory outside torch's allocator)
at each memory line and setup stage.

Errors: **without runtime** = (estimate total - its ``runtime`` term - max allocated) / max allocated * 100, the
issue's metric (``max_memory_allocated`` cannot contain the CUDA context, NCCL or fragmentation the runtime term
stands for); **device** = (estimate total - device peak) / device peak * 100. The table also gives the error of the
whole estimate against max allocated and against max reserved. Nothing here changes plan/memory.py CALIBRATION.
The plan says ``transformer_impl="local"``: the mcore engine's layers (standard unfused attention, unfused SwiGLU,
torch AdamW).

Phases: the allocated memory after a step holds weights, gradients, optimizer state, the persistent workspace and
the distributed optimizer's fp32 main grads (freed by the next ``zero_grad``, before the forward passes), so
static % = (weights + gradients + optimizer + workspace + fp32 main grads - allocated after the last report) / that,
and dynamic % compares activations + dispatcher with max allocated - (allocated after - fp32 main grads).

Run (GPU host, megatron-core importable): python3 benchmarks/gpu_memory.py --out /tmp/mem [--configs k2_1gpu ...]
          [--dry-run: print plans, payload configs and estimates; no GPU needed]
          [--offline results.json: recompute the estimates for the configs recorded there against their recorded
           measurements (max allocated, allocated, max reserved, device peak); no GPU, nothing is run; --out optional]
Prints tables and ``RESULT memory_error_pct_without_runtime_<config>=<x> %`` and ``RESULT
memory_device_error_pct_<config>=<x> %`` lines; writes ``<out>/gpu_memory.json``
(``<out>/gpu_memory_offline.json`` with --offline). Without --dry-run / --offline, a host with fewer CUDA GPUs than
the configs need (or without megatron-core) gets one line and exit status 3, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from provenance import provenance, require_gpu  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudai_mbridge.catalog import get_gpu, get_model  # noqa: E402
from cloudai_mbridge.launch.training import training_config  # noqa: E402
from cloudai_mbridge.plan import TrainingPlan  # noqa: E402
from cloudai_mbridge.plan.memory import GIB, MemoryEstimate, estimate_memory  # noqa: E402

MIB = 1 << 20

# name -> plan settings. The mcore engine runs tp = pp = cp = 1 (payload/train_config.py mcore_unsupported).
CONFIGS: dict[str, dict] = {
    "k2_1gpu": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096, "balanced": False},
    "k2_ep2": {"model": "kimi_k2_proxy", "gpus": 2, "ep": 2, "mbs": 1, "gbs": 8, "seq": 4096, "balanced": True},
    # Same tokens per micro-batch as k2_1gpu (the estimate is identical), half the sequence: isolates the s^2 term.
    "k2_1gpu_s2048": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 2, "gbs": 8, "seq": 2048,
                      "balanced": False},
    "dsv3_ep2": {"model": "deepseek_v3_proxy", "gpus": 2, "ep": 2, "mbs": 1, "gbs": 8, "seq": 4096,
                 "balanced": True},
    # Held out (not used to derive the phase-wise backward working space): twice the tokens per micro-batch at a
    # quarter of the sequence (s^2 small: the MoE blocks, not the attention scores, set the peak); and the second
    # model on one GPU at two sequence lengths.
    "k2_1gpu_s1024": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 8, "gbs": 32, "seq": 1024,
                      "balanced": False},
    "dsv3_1gpu": {"model": "deepseek_v3_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096,
                  "balanced": False},
    "dsv3_1gpu_s2048": {"model": "deepseek_v3_proxy", "gpus": 1, "ep": 1, "mbs": 2, "gbs": 8, "seq": 2048,
                        "balanced": False},
    # Engine "bridge": Megatron-Bridge's DeepSeek-V3 recipe with Transformer Engine layers (its precision-aware
    # optimizer, TE's fused kernels), mock data, 1 GPU, iters iterations. te_*_bf16 / te_*_fp8 are also the timing runs
    # (>= 30 steady iterations); the s2048 / s1024 ones are held out of any calibration of the estimate.
    "te_dsv3_bf16": {"model": "deepseek_v3_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096,
                     "balanced": False, "engine": "bridge", "precision": "bf16", "iters": 40},
    "te_k2_bf16": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096,
                   "balanced": False, "engine": "bridge", "precision": "bf16", "iters": 40},
    "te_dsv3_fp8": {"model": "deepseek_v3_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096,
                    "balanced": False, "engine": "bridge", "precision": "fp8_tensorwise", "iters": 40},
    "te_k2_fp8": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 1, "gbs": 4, "seq": 4096,
                  "balanced": False, "engine": "bridge", "precision": "fp8_tensorwise", "iters": 40},
    "te_dsv3_s2048": {"model": "deepseek_v3_proxy", "gpus": 1, "ep": 1, "mbs": 2, "gbs": 8, "seq": 2048,
                      "balanced": False, "engine": "bridge", "precision": "bf16", "iters": 8},
    "te_k2_s1024": {"model": "kimi_k2_proxy", "gpus": 1, "ep": 1, "mbs": 4, "gbs": 16, "seq": 1024,
                    "balanced": False, "engine": "bridge", "precision": "bf16", "iters": 8},
}
BRIDGE_CONFIGS = [n for n, c in CONFIGS.items() if c.get("engine") == "bridge"]
USE_DISTRIBUTED_OPTIMIZER = True  # train_mcore.py: on unless the config says use_distributed_optimizer = false


def engine_of(name: str) -> str:
    return CONFIGS[name].get("engine", "mcore")


def make_plan(name: str, iters: int) -> TrainingPlan:
    c = CONFIGS[name]
    bridge = engine_of(name) == "bridge"
    return TrainingPlan(
        model=get_model(c["model"]), gpu=get_gpu("h200"), num_nodes=1, gpus_per_node=c["gpus"], tp=1, pp=1, cp=1,
        ep=c["ep"], etp=1, mbs=c["mbs"], gbs=c["gbs"], seq_length=c["seq"], train_iters=c.get("iters", iters),
        dispatcher="alltoall", recompute="none", precision=c.get("precision", "bf16"),
        force_balanced_routing=c["balanced"], sequence_parallel=False,
        use_distributed_optimizer=USE_DISTRIBUTED_OPTIMIZER, optimizer="adam",
        # engine "mcore": Megatron-Core's local layers; "bridge": TE layers (what test_definition.plan() sets)
        transformer_impl="transformer_engine" if bridge else "local", precision_aware_optimizer=bridge,
    )


def payload_config(plan: TrainingPlan, output_dir: str, engine: str = "mcore") -> dict:
    return training_config(plan, data="mock", seed=1234, log_interval=1, engine=engine, output_dir=output_dir,
                           checkpoint_dir=None, hf_model_id=None,
                           # the bridge engine keeps the recipe's choice (the DeepSeek-V3 recipe's is on, too)
                           **({"use_distributed_optimizer": USE_DISTRIBUTED_OPTIMIZER} if engine == "mcore" else {}))


def run_config(name: str, args: argparse.Namespace, out: Path) -> dict:
    from cloudai_mbridge.metrics import parse_training_run
    from cloudai_mbridge.payload.refit.local import launch

    plan = make_plan(name, args.iters)
    folder = out / "runs" / name
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    cfg = payload_config(plan, str(folder), engine_of(name))
    (folder / "mbridge_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    idle = device_used_now()
    sampler = DeviceSampler(plan.world_size)
    start = time.perf_counter()
    try:
        run = launch(cfg, plan.world_size, timeout=args.timeout_s, module="cloudai_mbridge.payload.train", cwd=ROOT,
                     env={"PYTHONUNBUFFERED": "1",
                          # bridge: the recipe's allocations by owner and dtype, and each later iteration's own peak
                          **({"MBRIDGE_MEMORY_BREAKDOWN": "1"} if engine_of(name) == "bridge" else {})})
    finally:
        device_peaks = sampler.stop()
    wall = time.perf_counter() - start
    for rank, (stdout, stderr) in enumerate(zip(run.stdout, run.stderr, strict=True)):
        (folder / "logs" / f"rank-{rank}.log").write_text(stdout + stderr)
    m = parse_training_run(folder)
    est = estimate_memory(plan)
    row: dict = {"name": name, "settings": CONFIGS[name], "world_size": plan.world_size, "returncodes": run.returncodes,
                 "wall_s": wall, "status": m.status, "problems": list(m.problems), "run_folder": str(folder),
                 "estimate": estimate_row(est),
                 "memory_reports": [{"rank": r.rank, "after": r.after_iterations, "allocated": r.allocated_bytes,
                                     "max_allocated": r.max_allocated_bytes, "reserved": r.reserved_bytes,
                                     "max_reserved": r.max_reserved_bytes} for r in m.memory],
                 "iteration_ms_median": m.iteration_time_ms.median,
                 "engine": engine_of(name), "iteration_source": m.iteration_source,
                 "iteration_time_ms": asdict(m.iteration_time_ms), "tflops_per_gpu": asdict(m.tflops_per_gpu),
                 "iterations_done": max((r.iteration for r in m.iterations), default=0),
                 "loss_first_last": _first_last(m.loss_curve),
                 "payload_lines": payload_lines(folder)}
    row.update(bridge_memory_lines(row["payload_lines"]))
    peak = m.peak_allocated_bytes
    if peak:
        top = max(m.memory, key=lambda r: (r.max_allocated_bytes or 0, r.after_iterations))
        last = max((r for r in m.memory if r.rank == top.rank), key=lambda r: r.after_iterations)
        row["measured"] = {"max_allocated": peak, "allocated_after_last_report": last.allocated_bytes or 0,
                           "max_reserved": m.peak_reserved_bytes, "rank": top.rank}
        outside = device_memory_reports(folder)
        row["device_memory_reports"] = outside
        if device_peaks and idle is not None:
            # nvidia-smi's memory.used over the run (every 100 ms), less what the GPUs held before it started
            row["measured"]["device_peak"] = max(p - i for p, i in zip(device_peaks, idle, strict=False))
            row["measured"]["device_idle"] = max(idle)
        reports = [r for r in outside if r["stage"] == "report"]
        if reports:
            row["measured"]["outside_allocator"] = max(r["outside_allocator"] for r in reports)
        row.update(compare(plan, est, row["measured"]))
    else:
        row["tail"] = run.describe()[-4000:]
    return row


PAYLOAD_LINE = re.compile(rb"^(MBRIDGE_(?:ENGINE|RECIPE|HF_CONFIG|FALLBACK|PROVIDER|DISPATCHER|CONFIG_ERROR|"
                          rb"MEMORY_BREAKDOWN|STEP_MEMORY) .*)$", re.M)


def payload_lines(folder: Path) -> list[str]:
    """Rank 0's MBRIDGE_* lines that say which code path ran (engine, recipe, config source, fallbacks, provider
    fields changed, dispatcher built)."""
    log = folder / "logs" / "rank-0.log"
    if not log.is_file():
        return []
    return [m.group(1).decode(errors="replace") for m in PAYLOAD_LINE.finditer(log.read_bytes())]


def bridge_memory_lines(lines: list[str]) -> dict:
    """The payload's MBRIDGE_MEMORY_BREAKDOWN (bytes by owner and dtype after iteration 2) and MBRIDGE_STEP_MEMORY
    lines (each later iteration's peak over what it started with: its activations and transients), rank 0."""
    out: dict = {}
    steps = []
    for line in lines:
        tag, _, rest = line.partition(" ")
        fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        if tag == "MBRIDGE_MEMORY_BREAKDOWN":
            out["breakdown"] = {k: int(v) for k, v in fields.items() if v.isdigit() and k not in ("rank", "iteration")}
        elif tag == "MBRIDGE_STEP_MEMORY":
            steps.append(int(fields["peak"]) - int(fields["start"]))
    if steps:
        out["step_peak_over_start"] = {"n": len(steps), "median": statistics.median(steps), "max": max(steps),
                                       "min": min(steps)}
    return out


def _first_last(curve: dict[int, float]) -> list | None:
    if not curve:
        return None
    first, last = min(curve), max(curve)
    return [first, curve[first], last, curve[last]]


DEVICE_LINE = re.compile(rb"MBRIDGE_DEVICE_MEMORY rank=(\d+) iteration=(\d+) used_mib=([\d.]+) total_mib=([\d.]+) "
                         rb"reserved_mib=([\d.]+) outside_allocator_mib=(-?[\d.]+)(?: stage=(\w+))?")


def device_memory_reports(folder: Path) -> list[dict]:
    """The payload's MBRIDGE_DEVICE_MEMORY lines (torch.cuda.mem_get_info next to each memory line), in bytes."""
    out = []
    for log in sorted((folder / "logs").glob("rank-*.log")):
        for m in DEVICE_LINE.finditer(log.read_bytes()):
            rank, it, used, total, reserved, outside, stage = m.groups()
            out.append({"rank": int(rank), "after": int(it), "used": float(used) * MIB, "total": float(total) * MIB,
                        "reserved": float(reserved) * MIB, "outside_allocator": float(outside) * MIB,
                        "stage": (stage or b"report").decode()})
    return out


def device_used_now() -> list[int] | None:
    """Per-GPU memory.used (bytes) as nvidia-smi reports it now; None where nvidia-smi is missing."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [int(float(x)) * MIB for x in text.split()]


class DeviceSampler:
    """nvidia-smi memory.used every 100 ms in the background; ``stop()`` gives the per-GPU maxima (bytes)."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None

    def stop(self) -> list[int] | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        text, _ = self.proc.communicate(timeout=30)
        peaks: dict[int, int] = {}
        for line in text.splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].replace(".", "").isdigit():
                index, used = int(parts[0]), int(float(parts[1])) * MIB
                peaks[index] = max(peaks.get(index, 0), used)
        return [peaks[i] for i in sorted(peaks)][: self.gpus] or None


def estimate_row(est: MemoryEstimate) -> dict:
    return {**est.terms(), "total": est.total, "in_flight": est.in_flight}


def fp32_main_grad_bytes(plan: TrainingPlan, est: MemoryEstimate) -> float:
    """The part of ``est.step`` that survives the step: with the local engine's torch AdamW the step is 4 B (fp32
    main grads) + 4 B (foreach temporary) per parameter of the shard (plan/memory.py docstring, term 4)."""
    return est.step / 2 if plan.transformer_impl == "local" and plan.optimizer == "adam" else est.step


def compare(plan: TrainingPlan, est: MemoryEstimate, measured: dict) -> dict:
    """Error metrics of ``est`` against one run's measured peaks (module docstring); the same for a GPU run and
    for --offline."""
    peak, static = measured["max_allocated"], measured["allocated_after_last_report"]
    reserved = measured.get("max_reserved")
    main_grads = fp32_main_grad_bytes(plan, est)
    est_static = est.weights + est.gradients + est.optimizer + est.workspace + main_grads
    est_dynamic = est.activations + est.dispatcher
    measured_dynamic = peak - (static - main_grads)
    device = measured.get("device_peak")
    return {
        # the whole estimate against what the driver saw in use (nvidia-smi), runtime term included
        "device_error_pct": 100 * (est.total - device) / device if device else None,
        "measured_runtime": device - peak if device else None,
        "error_pct": 100 * (est.total - peak) / peak,
        # the metric: what the caching allocator holds at most (the estimate less its runtime term, which
        # max_memory_allocated cannot see) against torch.cuda.max_memory_allocated
        "error_pct_without_runtime": 100 * (est.total - est.runtime - peak) / peak,
        "error_pct_vs_max_reserved": 100 * (est.total - reserved) / reserved if reserved else None,
        "static_error_pct": 100 * (est_static - static) / static if static else None,
        "dynamic_error_pct": (100 * (est_dynamic - measured_dynamic) / measured_dynamic
                              if measured_dynamic > 0 else None),
    }


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / MIB:.0f}"


def print_table(rows: list[dict]) -> None:
    print("\nEstimate terms (MiB): weights grads optim activ disp runtime = total; measured (MiB): static = allocated "
          "after it. 2, peak = max allocated, resv = max reserved; err = (est - peak) / peak")
    print("total = wts + grads + optim + ws + disp + rt + max(activ, step)")
    print(f"{'config':>14} {'wts':>6} {'grads':>6} {'optim':>6} {'activ':>6} {'step':>5} {'ws':>5} {'disp':>5} "
          f"{'rt':>5} {'EST':>6} | {'static':>6} {'peak':>6} {'resv':>6} | {'err%':>6} {'err-rt%':>7} "
          f"{'err/resv%':>9} {'stat%':>6} {'dyn%':>6} {'status':>8}")
    for r in rows:
        e, mm = r["estimate"], r.get("measured", {})
        print(f"{r['name']:>14} {_mib(e['weights']):>6} {_mib(e['gradients']):>6} {_mib(e['optimizer']):>6} "
              f"{_mib(e['activations']):>6} {_mib(e.get('step', 0)):>5} {_mib(e.get('workspace', 0)):>5} "
              f"{_mib(e['dispatcher']):>5} {_mib(e['runtime']):>5} {_mib(e['total']):>6} | "
              f"{_mib(mm.get('allocated_after_last_report')):>6} {_mib(mm.get('max_allocated')):>6} "
              f"{_mib(mm.get('max_reserved')):>6} | {_pct(r.get('error_pct')):>6} "
              f"{_pct(r.get('error_pct_without_runtime')):>7} {_pct(r.get('error_pct_vs_max_reserved')):>9} "
              f"{_pct(r.get('static_error_pct')):>6} {_pct(r.get('dynamic_error_pct')):>6} {r['status']:>8}",
              flush=True)
    if any(r.get("measured", {}).get("device_peak") for r in rows):
        print("\nDevice (nvidia-smi memory.used every 100 ms, less the idle GPU): est = the whole estimate incl. its "
              "runtime term; runtime (meas.) = device peak - max allocated; outside = mem_get_info used - reserved at "
              "the memory lines (CUDA context, NCCL, non-torch allocations)")
        print(f"{'config':>14} {'EST':>6} {'device':>6} {'err%':>6} | {'rt est':>6} {'rt meas':>7} {'outside':>7}")
        for r in rows:
            mm = r.get("measured", {})
            print(f"{r['name']:>14} {_mib(r['estimate']['total']):>6} {_mib(mm.get('device_peak')):>6} "
                  f"{_pct(r.get('device_error_pct')):>6} | {_mib(r['estimate']['runtime']):>6} "
                  f"{_mib(r.get('measured_runtime')):>7} {_mib(mm.get('outside_allocator')):>7}  "
                  + ", ".join(f"{d['stage']} {_mib(d['outside_allocator'])}"
                              for d in r.get("device_memory_reports", []) if d["stage"] != "report"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="output folder (required unless --offline)")
    parser.add_argument("--configs", nargs="+", default=["k2_1gpu", "k2_ep2"], choices=sorted(CONFIGS))
    parser.add_argument("--iters", type=int, default=4)
    parser.add_argument("--timeout-s", type=int, default=180, help="per config")
    parser.add_argument("--dry-run", action="store_true", help="print plans, payload configs, estimates; no GPU")
    parser.add_argument("--offline", type=Path, metavar="RESULTS_JSON",
                        help="recompute the estimates for a results file's configs against its measurements; no GPU")
    args = parser.parse_args(argv)
    if args.out is None and args.offline is None:
        parser.error("--out is required unless --offline")
    return args


def bridge_errors(plan: TrainingPlan, ours_total: float, measured: dict) -> dict:
    """Our whole estimate and Megatron-Bridge's own against the device peak and max allocated (% of measured); None
    where a measurement or Bridge's estimate is missing (Bridge's needs the TE path and a DeepSeek-V3-family model)."""
    from cloudai_mbridge.plan.bridge_estimate import bridge_estimate

    bridge = bridge_estimate(plan)
    peak, alloc = measured.get("device_peak"), measured.get("max_allocated")

    def pct(est: float | None, meas: float | None) -> float | None:
        return None if est is None or not meas else (est - meas) / meas * 100

    b = None if bridge is None else bridge.total
    return {"bridge_estimate": b, "ours_device_error_pct": pct(ours_total, peak),
            "bridge_device_error_pct": pct(b, peak), "bridge_max_alloc_error_pct": pct(b, alloc)}


def offline(results_path: Path, out: Path | None, argv: list[str]) -> int:
    """Today's estimate for every config a GPU run recorded, against that run's measured peaks (nothing runs)."""
    recorded = json.loads(results_path.read_text())
    rows = []
    for old in recorded["configs"]:
        if "measured" not in old:
            continue
        plan = make_plan(old["name"], 4)
        assert old["settings"] == CONFIGS[old["name"]], f"{old['name']}: recorded settings differ from CONFIGS"
        est = estimate_memory(plan)
        rows.append({"name": old["name"], "status": old["status"], "estimate": estimate_row(est),
                     "measured": old["measured"], "reports": old.get("memory_reports", []),
                     **compare(plan, est, old["measured"]),
                     "previous": {k: old[k] for k in ("estimate", "error_pct", "error_pct_without_runtime",
                                                      "error_pct_vs_max_reserved", "static_error_pct",
                                                      "dynamic_error_pct")}})
    print(f"offline: estimates recomputed by plan/memory.py for the configs of {results_path}, against its recorded "
          "measurements (the same peaks); units MiB")
    print_table(rows)
    print("\nprevious estimate (as recorded) -> now: total MiB, error % vs max allocated")
    for r in rows:
        print(f"{r['name']:>14} {_mib(r['previous']['estimate']['total']):>6} -> {_mib(r['estimate']['total']):>6}   "
              f"{_pct(r['previous']['error_pct']):>6} -> {_pct(r['error_pct']):>6}")
    print("\nphases (MiB): step = wts + grads + optim + ws + step vs the first report's max allocated (1 GPU: the "
          "first step, before which no Adam moments exist; 2 GPUs: that iteration's forward/backward); activations per "
          "layer and micro-batch as plan/memory.py sums them; working = the backward working space (the largest "
          "phase of the first backward, plan/memory.py _backward_working)")
    from cloudai_mbridge.plan.memory import _activations, _backward_working

    for r in rows:
        plan, e = make_plan(r["name"], 4), r["estimate"]
        act = _activations(plan, plan.recompute)
        first = [m["max_allocated"] for m in r["reports"] if m["after"] == 1]
        step_phase = e["weights"] + e["gradients"] + e["optimizer"] + e["workspace"] + e["step"]
        print(f"{r['name']:>14} step phase {_mib(step_phase):>6} vs {_mib(max(first) if first else None):>6} | "
              f"dense {_mib(act.dense)}, "
              f"moe {_mib(act.moe)}, loss {_mib(act.loss)}, mtp {_mib(act.mtp) if plan.effective_mtp_layers else '-'}, "
              f"working {_mib(_backward_working(plan, act, holds_loss=True))}, "
              f"score elements/layer {act.scores:.0f}")
    print("\nwhich estimate to trust: the whole estimate and Megatron-Bridge's own (plan/bridge_estimate.py) against "
          "the device peak (nvidia-smi) and torch's max allocated, error % = (estimate - measured) / measured")
    for r in rows:
        for key, value in bridge_errors(make_plan(r["name"], 4), r["estimate"]["total"], r["measured"]).items():
            r[key] = value
        print(f"{r['name']:>16} ours vs device peak {_pct(r['ours_device_error_pct']):>7} | Bridge's "
              f"{_mib(r['bridge_estimate'])} MiB vs device peak {_pct(r['bridge_device_error_pct']):>7}, vs max "
              f"allocated {_pct(r['bridge_max_alloc_error_pct']):>7}")
    for r in rows:
        print(f"RESULT memory_estimate_{r['name']}={r['estimate']['total'] / MIB:.0f} MiB")
        if r.get("bridge_device_error_pct") is not None:
            print(f"RESULT bridge_estimate_device_error_pct_{r['name']}={r['bridge_device_error_pct']:+.1f} %")
        print(f"RESULT memory_error_pct_without_runtime_{r['name']}={r['error_pct_without_runtime']:+.1f} %")
        if r.get("device_error_pct") is not None:
            print(f"RESULT memory_device_error_pct_{r['name']}={r['device_error_pct']:+.1f} %")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        result = {"experiment": "gpu_memory_offline", "source": str(results_path),
                  "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "command": " ".join(["python3", f"benchmarks/{Path(__file__).name}", *argv]),
                  "calibration": _calibration(), "configs": rows}
        (out / "gpu_memory_offline.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.offline is not None:
        return offline(args.offline, args.out, argv)
    if args.dry_run:
        from cloudai_mbridge.payload.train.config import check_config, mcore_unsupported

        for name in args.configs:
            plan = make_plan(name, args.iters)
            cfg = check_config(payload_config(plan, "/tmp/run"))
            problems = mcore_unsupported(cfg)
            print(f"{name}: world {plan.world_size} dp {plan.dp} edp {plan.expert_dp} microbatches "
                  f"{plan.num_microbatches}; estimate {estimate_memory(plan).summary()}; mcore problems {problems}")
        return 0
    require_gpu(__file__, max(CONFIGS[n]["gpus"] for n in args.configs), ("megatron.core",))
    args.out.mkdir(parents=True, exist_ok=True)
    info = provenance([f"benchmarks/{Path(__file__).name}", *argv])
    print(f"device: {info.get('gpus')} torch {info.get('torch')} megatron-core {info.get('megatron_core')}")
    per_config = ", ".join(f"{n}={engine_of(n)}" for n in args.configs)
    print(f"method: payload train.py, engine per config ({per_config}), one process per GPU; "
          "measured = max of the Megatron memory lines' "
          "'max allocated' (torch.cuda.max_memory_allocated, after iterations 1 and 2); estimate = "
          "plan.memory.estimate_memory(plan) for the same plan; units MiB", flush=True)
    result: dict = {"experiment": "gpu_memory", "provenance": info, "calibration": _calibration(), "configs": []}
    for name in args.configs:
        row = run_config(name, args, args.out)
        result["configs"].append(row)
        print(f"[{name}] status={row['status']} rc={row['returncodes']} wall_s={row['wall_s']:.1f} "
              f"peak_MiB={_mib(row.get('measured', {}).get('max_allocated'))} "
              f"est_MiB={_mib(row['estimate']['total'])}", flush=True)
        if "tail" in row:
            print(row["tail"][-1500:], flush=True)
        (args.out / "gpu_memory.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    print_table(result["configs"])
    failed = False
    for r in result["configs"]:
        if "error_pct" not in r:
            failed = True
            print(f"RESULT memory_status_{r['name']}={r['status']}")
            continue
        print(f"RESULT memory_measured_max_allocated_{r['name']}={r['measured']['max_allocated'] / MIB:.0f} MiB")
        print(f"RESULT memory_estimate_{r['name']}={r['estimate']['total'] / MIB:.0f} MiB")
        print(f"RESULT memory_error_pct_without_runtime_{r['name']}={r['error_pct_without_runtime']:+.1f} %")
        if r.get("device_error_pct") is not None:
            print(f"RESULT memory_measured_device_peak_{r['name']}={r['measured']['device_peak'] / MIB:.0f} MiB")
            print(f"RESULT memory_device_error_pct_{r['name']}={r['device_error_pct']:+.1f} %")
    return 1 if failed else 0


def _calibration() -> dict:
    from cloudai_mbridge.plan.memory import CALIBRATION

    return {**CALIBRATION, "gib": GIB}


if __name__ == "__main__":
    sys.exit(main())
