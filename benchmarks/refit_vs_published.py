"""Our refit model against someone else's table: every row of NeMo-RL's NCCL-Xfer refit table (seed 001, PR 2808,
"Current test results", Megatron -> vLLM) predicted on paper and printed beside the published seconds.

Method (units: GB = 1e9 B, s). The model is cloudai_mbridge/plan/refit_bytes.py, NOT fitted to this table: the byte
plan of each layout pair (which source rank sends which bytes to which destination rank), a GPU's seconds = remote
bytes inside its node / NVLink rate + bytes between nodes / NIC rate + local copies / copy rate, the refit = the
slowest GPU. Architectures: Qwen3-4B, Qwen3-30B-A3B, Qwen3-235B-A22B from their public config.json
(cloudai_mbridge/catalog/refit_models.py), DeepSeek-V3 from catalog/models.py (MTP left out); bf16, FP8 rows at
1 byte per linear weight (embedding, output layer and norms bf16).

Assumed, because the PR states no hardware: H100/H200 nodes of 8 GPUs (NVLink inside, one 400 Gb/s NIC per GPU =
50 GB/s), training and generation on separate nodes (NCCL-Xfer is the disaggregated Megatron -> vLLM transfer)
with as many generation GPUs as training GPUs (the vLLM side's TP x DP is the GPU count of both); expert tensor
parallel 1 on the Megatron side, the vLLM side TP-shards experts (ep 1, etp = tp); PP layers split evenly.
A stated Megatron DP that contradicts that count is read as this count's DP (the row's note says so).

Columns: "mcore" = megatron-core's planner (every destination replica reads from source replica 0) at the rate its
service reached (57.68 GB/s/GPU on 2x H200, 16 % of the NCCL ceiling, the same fraction of the NIC); "ours" =
local-first planner at the replay executor's pairwise rate (267.44 GB/s/GPU on 4x H200, 75 % of its ceiling, the same
fraction of the NIC); "line" = local-first at NVLink/NIC line rate (359.3 / 50 GB/s/GPU). Ratio = predicted /
published midpoint. The nano-v3 and super-v3 rows (NVIDIA Nemotron-3 hybrid Mamba-MoE models) are not predicted: the
byte plan has no Mamba layers.
"""

# ruff: noqa: RUF001, RUF002  (the table's x and dash are the seed's own characters: rows are checked against it)
from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudai_mbridge.catalog import get_model
from cloudai_mbridge.catalog.refit_models import REFIT_MODELS
from cloudai_mbridge.plan.refit_bytes import bandwidths, build_plan, gqa_tensors, predict_seconds, side, spec_tensors

RESULTS = Path(__file__).resolve().parent / "results"
SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "001_0d19329bed847684.txt"
GPUS_PER_NODE = 8
MODELS = {"4b": "qwen3_4b", "30b": "qwen3_30b_a3b", "235b": "qwen3_235b_a22b", "dsv3": "deepseek_v3"}
NOT_MODELLED = {"nano-v3": "NVIDIA Nemotron-3 Nano (hybrid Mamba-MoE): the byte plan has no Mamba layers",
                "super-v3": "NVIDIA Nemotron-3 Super (hybrid Mamba-MoE): the byte plan has no Mamba layers"}

# The table as published (seed 001, copied row by row): test, mapping, refit seconds low, high.
TABLE = """
4b | DP8 → DP8 | 0.07 | 0.08
4b | DP8 → TP8 | 0.07 | 0.08
4b | PP2×DP4 → TP4×DP2 | 0.09 | 0.09
4b | PP4×DP2 → TP4×DP2 | 0.13 | 0.15
4b | TP2×PP2×DP2 → TP4×DP2 | 0.13 | 0.13
4b | TP2×DP4 → TP4×DP2 | 0.11 | 0.15
30b | EP4×TP2×DP2 → TP4×DP4 | 0.54 | 0.67
30b | EP4×TP2×PP2 → TP4×DP4 | 0.48 | 0.52
30b | EP8×PP2 → TP2×DP8 | 0.51 | 0.55
30b | EP8×PP2 → TP8×DP2 | 0.50 | 0.51
nano-v3 | EP8×TP2 → TP4×DP4 | 0.48 | 0.55
super-v3 | EP8×TP8xPP2xDP2 → TP8×DP2 | 1.66 | 1.94
235b | TP4×PP8×EP16 → TP8×DP16 | 4.56 | 4.85
dsv3 | PP16×EP16 → TP32×DP8 | 7.65 | 9.94
4b (FP8) | DP8 → DP8 | 0.06 | 0.07
4b (FP8) | DP8 → TP4×DP2 | 0.05 | 0.10
4b (FP8) | PP2×DP4 → TP4×DP2 | 0.06 | 0.10
4b (FP8) | PP4×DP2 → TP4×DP2 | 0.08 | 0.10
4b (FP8) | TP2×DP4 → TP4×DP2 | 0.09 | 0.15
30b (FP8) | EP4×TP2×PP2 → TP2×DP8 | 1.54 | 1.69
30b (FP8) | EP8×PP2 → TP2×DP8 | 1.34 | 1.60
30b (FP8) | EP8×DP2 → TP2×DP8 | 1.21 | 1.62
"""


def parse_layout(text: str) -> dict[str, int]:
    """'EP4×TP2×DP2' -> {'ep': 4, 'tp': 2, 'dp': 2}; absent factors are 1 (dp: None = derived)."""
    found = {k.lower(): int(v) for k, v in re.findall(r"(TP|PP|EP|DP)(\d+)", text.upper())}
    return {"tp": found.get("tp", 1), "pp": found.get("pp", 1), "ep": found.get("ep", 1), "dp": found.get("dp")}


def rows() -> list[dict]:
    out = []
    for line in TABLE.strip().splitlines():
        test, mapping, lo, hi = (c.strip() for c in line.split("|"))
        src, dst = (parse_layout(x) for x in mapping.split("→"))
        out.append({"test": test, "mapping": mapping, "lo": float(lo), "hi": float(hi), "src": src, "dst": dst,
                    "model_key": test.split()[0], "fp8": "FP8" in test})
    return out


def check_seed(table: list[dict]) -> str:
    """Every row is the seed's own line (when the seed file is at hand)."""
    if not SEED.is_file():
        return f"seed file {SEED} not found: the table above is the copy in this script"
    text = SEED.read_text(encoding="utf-8", errors="replace")
    for r in table:
        rng = f"{r['lo']:.2f}s" if r["lo"] == r["hi"] else f"{r['lo']:.2f}s–{r['hi']:.2f}s"
        line = f"{r['test']} Megatron → vLLM {r['mapping']} {rng}"
        if line not in text:
            raise SystemExit(f"refit_vs_published.py: row not in the seed as written: {line!r}")
    return f"all {len(table)} rows checked against {SEED.name}"


def tensors(r: dict):
    key = MODELS[r["model_key"]]
    if key in REFIT_MODELS:
        return gqa_tensors(REFIT_MODELS[key], 1 if r["fp8"] else 2, 2 if r["fp8"] else None)
    return spec_tensors(get_model(key))


def layouts(r: dict, model) -> tuple:
    """(source side, destination side, note): both sides the vLLM side's GPU count, disjoint ranks."""
    d, s = r["dst"], r["src"]
    world = d["tp"] * d["pp"] * (d["dp"] or 1)
    note = []
    dp_src = world // (s["tp"] * s["pp"])
    if s["dp"] is not None and s["dp"] != dp_src:
        note.append(f"stated DP{s['dp']} read as dense DP{dp_src} ({world} GPUs a side)")
    moe = model.num_experts > 1
    src = side(s["tp"], s["pp"], s["ep"], world, etp=1 if moe else None, name="megatron")
    dst = side(d["tp"], d["pp"], 1, world, etp=d["tp"], first_rank=world, name="vllm")
    return src, dst, world, "; ".join(note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=RESULTS / "refit_vs_published.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    table = rows()
    seed_check = check_seed(table)
    rates = {b.name: b for b in bandwidths()}
    results = []
    for r in table:
        if r["model_key"] in NOT_MODELLED:
            results.append({**r, "skip": NOT_MODELLED[r["model_key"]]})
            continue
        model = tensors(r)
        src, dst, world, note = layouts(r, model)
        mcore = build_plan(model, src, dst, GPUS_PER_NODE, "megatron")
        local = build_plan(model, src, dst, GPUS_PER_NODE, "local-first")
        mid = (r["lo"] + r["hi"]) / 2
        pred = {"mcore": predict_seconds(mcore, rates["measured"]),
                "ours": predict_seconds(local, rates["replay-pairwise"]),
                "line": predict_seconds(local, rates["line-rate"])}
        results.append({**r, "world": world, "note": note, "model_gb": model.bytes / 1e9,
                        "worst_recv_gb": local.worst("recv") / 1e9, "worst_send_gb": local.worst("send_remote") / 1e9,
                        "mcore_send_gb": mcore.worst("send_remote") / 1e9, "pred": pred,
                        "ratio": {k: v / mid for k, v in pred.items()},
                        # the rate the published time implies for the busiest GPU's bytes (local-first plan)
                        "implied_gbps": max(local.worst("recv_remote"), local.worst("send_remote")) / 1e9 / mid})
    done = [x for x in results if "pred" in x]
    header = ("| test | mapping | GPUs a side | model GB | most recv / send GB per GPU (local-first) | published s | "
              "implied GB/s per GPU | mcore s (ratio) | ours s (ratio) | line s (ratio) | note |")
    lines = [header, "|" + "---|" * 11]
    for x in results:
        pub = f"{x['lo']:.2f}" if x["lo"] == x["hi"] else f"{x['lo']:.2f}-{x['hi']:.2f}"
        if "skip" in x:
            lines.append(f"| {x['test']} | {x['mapping']} | | | | {pub} | | not predicted | | | {x['skip']} |")
            continue
        cells = " | ".join(f"{x['pred'][k]:.3f} ({x['ratio'][k]:.2f}x)" for k in ("mcore", "ours", "line"))
        lines.append(f"| {x['test']} | {x['mapping']} | {x['world']} | {x['model_gb']:.1f} | "
                     f"{x['worst_recv_gb']:.2f} / {x['worst_send_gb']:.2f} | {pub} | {x['implied_gbps']:.1f} | "
                     f"{cells} | {x['note']} |")
    summary = {}
    for k in ("mcore", "ours", "line"):
        errs = [abs(x["ratio"][k] - 1) for x in done]
        logs = [abs(math.log(x["ratio"][k])) for x in done]
        inside = sum(x["lo"] / 1.0 <= x["pred"][k] <= x["hi"] for x in done)
        within2 = sum(0.5 <= x["ratio"][k] <= 2 for x in done)
        summary[k] = (statistics.median(errs), math.exp(statistics.median(logs)), inside, within2)
    for k in ("ours", "line"):  # where the bf16 / FP8 groups miss, apart
        for fp8 in (False, True):
            grp = [x["ratio"][k] for x in done if x["fp8"] == fp8]
            summary[f"{k}_{'fp8' if fp8 else 'bf16'}"] = statistics.median(grp)
    print(__doc__.strip().splitlines()[0])
    print(f"seed: {seed_check}; hardware: assumed ({GPUS_PER_NODE} GPUs a node, 50 GB/s NIC per GPU); code path: "
          "plan/refit_bytes.py build_plan + predict_seconds; rows predicted: "
          f"{len(done)} of {len(results)} ({len(results) - len(done)} not modelled)")
    print("\n".join(lines))
    for k, (med, geo, inside, within2) in ((k, v) for k, v in summary.items() if isinstance(v, tuple)):
        print(f"{k}: median |ratio - 1| = {med:.2f}, median factor off = {geo:.2f}x, inside the published range "
              f"{inside}/{len(done)}, within 2x {within2}/{len(done)}")
    print(f"median ratio, bf16 rows: ours {summary['ours_bf16']:.2f}x, line {summary['line_bf16']:.2f}x; FP8 rows: "
          f"ours {summary['ours_fp8']:.2f}x, line {summary['line_fp8']:.2f}x")
    print(f"wall {time.perf_counter() - t0:.1f} s")
    md = ["# Refit model vs NeMo-RL's published NCCL-Xfer table (seed 001)", "",
          "Written by `python3 benchmarks/refit_vs_published.py` (CPU, no GPU): the method and every assumption are "
          "in its docstring, repeated in short here.", "",
          "- Model: `cloudai_mbridge/plan/refit_bytes.py` (byte plan per GPU, slowest GPU's seconds), not fitted to "
          "this table. Architectures from public config.json values (`catalog/refit_models.py`), DeepSeek-V3 from "
          "`catalog/models.py`.",
          f"- Hardware assumed (the PR states none): {GPUS_PER_NODE} GPUs a node, NVLink inside, 50 GB/s NIC per GPU; "
          "training and generation on separate nodes, as many GPUs each as the vLLM side's TP x DP.",
          "- mcore: megatron-core's planner at its service's measured rate; ours: local-first planner at the replay "
          "executor's pairwise rate; line: local-first at NVLink / NIC line rate. Ratio = predicted / published "
          "midpoint.", "", *lines, ""]
    for k, (med, geo, inside, within2) in ((k, v) for k, v in summary.items() if isinstance(v, tuple)):
        md.append(f"- {k}: median |ratio - 1| = {med:.2f}; median factor off {geo:.2f}x; inside the published range "
                  f"{inside}/{len(done)}; within 2x {within2}/{len(done)}.")
    md.append(f"- Median ratio, bf16 rows: ours {summary['ours_bf16']:.2f}x, line {summary['line_bf16']:.2f}x; FP8 "
              f"rows: ours {summary['ours_fp8']:.2f}x, line {summary['line_fp8']:.2f}x.")
    implied = {x["test"] + " " + x["mapping"]: x["implied_gbps"] for x in done}
    fast, slow = max(implied, key=implied.get), min(implied, key=implied.get)
    why = ("Where it misses, and why (read from the table, not fitted): the published times imply, for the busiest "
           f"GPU's bytes, from {implied[slow]:.1f} GB/s ({slow}) to {implied[fast]:.1f} GB/s ({fast}) per GPU. Above "
           "the assumed 50 GB/s NIC the transfer cannot have crossed one NIC per GPU byte for byte: either the "
           "hardware keeps both sides in one NVLink domain (GB200 NVL72; the PR does not say) or NCCL-Xfer sends a "
           "replicated shard across the network once and fans it out inside the node, which neither planner here "
           "does (local-first sends every replica its own copy). The largest models run far below line rate: "
           "per-tensor or per-bucket costs, vLLM's weight loading and the PP / EP gathers are in NCCL-Xfer's "
           "measured time and not in a bytes-over-bandwidth model with no per-op latency term, so the model is too "
           "fast there, and more so with more source stages (4b PP4 and TP2xPP2: published slower than DP8, "
           "predicted faster). FP8 rows are published slower than bf16 (30b: 1.2-1.7 s vs 0.5 s) while they move "
           "half the bytes: the on-the-fly quantization is compute the model does not price. Megatron-core's planner "
           "(every replica reads replica 0) is 1-2 orders of magnitude off the small rows: NCCL-Xfer is not that "
           "planner.")
    print(why)
    md += ["## Where it misses", "", why]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("\n".join(md) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"written: {args.out}")
    for k in ("mcore", "ours", "line"):
        med, geo, inside, within2 = summary[k]
        print(f"RESULT refit_published_median_abs_ratio_error_{k}={med:.3f} ratio")
        print(f"RESULT refit_published_median_factor_off_{k}={geo:.2f} x")
        print(f"RESULT refit_published_within_2x_{k}={within2}/{len(done)} rows")
    print(f"RESULT refit_published_rows_predicted={len(done)}/{len(results)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
