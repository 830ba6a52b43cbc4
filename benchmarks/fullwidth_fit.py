"""The memory estimate against the full-width layers measured on one H100 (benchmarks/gpu_fullwidth_memory.py).

Method: for every measured setting (DeepSeek-V3 / Kimi-K2 slice x precision x recompute x shape) the estimate's per-
layer bytes (``plan/memory.py _te_activations`` on the same slice plan) are set beside what the layer left allocated
after its forward (the difference of ``memory_allocated`` between consecutive layer hooks):

- ``dense``: layer 1 (the second dense layer: its input is another layer's output, as in a deep stack);
- ``moe``: layer 3 (the second MoE layer). Under ``fp8_tensorwise`` the payload's Bridge preset
  (``bf16_with_fp8_current_scaling_mixed``) runs the last layer in bf16 (``first_last_layers_bf16``), so that layer
  is compared with the bf16 estimate;
- ``mtp``: the MTP block (DeepSeek-V3), from the final norm's mark to the MTP layer's;
- ``head``: everything after the last decoder layer (final norm, MTP, logits), against the estimate's loss + MTP.

Fit / held-out split: the per-token element counts of ``_te_activations`` were read off the s4096 b1 settings (the
"fit" half: 21 settings per model); the s4096 b2 and s2048 b1 settings (18 per model) were not looked at and are the
held-out half. Error % = (estimate - measured) / measured. Full recompute keeps one layer input per layer by design
(Megatron's checkpoint inputs) while the hooks see the layers' outputs freed and re-made inside the checkpoints, so
its per-layer increments are not a layer's footprint: those rows are compared on the whole forward (``total``) and
left out of the per-layer maximum (said in the table). Static terms: bytes per parameter of the weights, FP8
blockwise weight copies per GEMM parameter. Units: MiB (2^20 B).

Run (CPU): python3 benchmarks/fullwidth_fit.py [--json benchmarks/results/fullwidth/gpu_fullwidth_memory.json]
[--out benchmarks/results/fullwidth]. Writes fullwidth_fit.md and fullwidth_fit.png; ends with RESULT lines.
A row without measurements (a failed setting) or with damaged marks is reported and never yields a number.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_fullwidth_memory import make_plan  # noqa: E402

from cloudai_mbridge.plan.memory import _padded_vocab, _te_activations, estimate_ranks  # noqa: E402

MIB = 1 << 20
NEEDED = ("layer0:dense", "layer1:dense", "layer2:moe", "layer3:moe", "final_norm", "output_layer")


def heldout(setting: dict) -> bool:
    return (setting["seq"], setting["mbs"]) != (4096, 1)


def measured_parts(row: dict) -> dict[str, float] | None:
    marks: dict[str, float] = {}
    for name, value in row["measured"]["marks"]:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return None
        marks.setdefault(name, value)
    if any(n not in marks for n in NEEDED):
        return None
    out = {"dense": marks["layer1:dense"] - marks["layer0:dense"],
           "moe": marks["layer3:moe"] - marks["layer2:moe"],
           "head": row["measured"]["after_forward"] - row["measured"]["start"] - marks["layer3:moe"],
           "total": row["measured"]["after_forward"] - row["measured"]["start"]}
    if "mtp0" in marks:
        out["mtp"] = marks["mtp0"] - marks["final_norm"]
    return out


def estimated_parts(setting: dict) -> dict[str, float]:
    plan = make_plan(setting)
    act = _te_activations(plan, plan.recompute)
    last = act
    if setting["precision"] == "fp8_tensorwise":  # the preset's bf16 last layer
        from dataclasses import replace

        last = _te_activations(replace(plan, precision="bf16"), plan.recompute)
    out = {"dense": act.dense, "moe": last.moe, "head": act.loss + (act.mtp if plan.effective_mtp_layers else 0.0)}
    layers = plan.model.first_k_dense * act.dense + (plan.model.num_layers - plan.model.first_k_dense) * act.moe
    layers += last.moe - act.moe
    out["total"] = act.embedding + layers + out["head"]
    if plan.effective_mtp_layers:
        out["mtp"] = act.mtp - act.loss
    return out


def gemm_params(row: dict) -> int:
    """Parameters of the GEMMs TE quantises: all but the embedding, the output layer and the small vectors."""
    s = row["setting"]
    plan = make_plan(s)
    h = plan.model.hidden_size
    vocab = _padded_vocab(plan.model.vocab_size, 1)
    return row["param_count"] - 2 * vocab * h


def analyse(doc: dict) -> tuple[list[dict], list[str]]:
    table, problems = [], []
    for row in doc["rows"]:
        s = row.get("setting", {})
        if "measured" not in row:
            problems.append(f"{s.get('name', '?')}: not measured ({row.get('error', 'no data')[:160]})")
            continue
        meas = measured_parts(row)
        if meas is None:
            problems.append(f"{s['name']}: damaged or missing layer marks, left out")
            continue
        est = estimated_parts(s)
        full = s["recompute"] == "full"
        # the backward's peak over the start (what the first backward needs on top of the saved activations: the
        # estimate's activations term with its working space, one micro-batch in flight)
        meas["peak"] = row["measured"]["backward_peak"] - row["measured"]["start"]
        est["peak"] = estimate_ranks(make_plan(s))[0].activations
        for kind in ("dense", "moe", "mtp", "head", "total", "peak"):
            if kind not in meas:
                continue
            m, e = meas[kind], est[kind]
            per_layer = kind in ("dense", "moe", "mtp") and not full
            err = 100.0 * (e - m) / m if m > 0 else float("nan")
            table.append({"setting": s["name"], "model": s["model"], "precision": s["precision"],
                          "recompute": s["recompute"], "shape": f"s{s['seq']} b{s['mbs']}",
                          "half": "held-out" if heldout(s) else "fit", "kind": kind, "measured_mib": m / MIB,
                          "estimate_mib": e / MIB, "err_pct": err, "per_layer": per_layer,
                          "rank": row.get("rank", 0)})
    return table, problems


def analyse_pipeline(doc: dict) -> tuple[list[dict], list[str]]:
    """PP2 / PP2-VP2 rows (benchmarks/gpu_fullwidth_parallel.py): each rank's forward-backward peak over what was
    allocated before it, against that rank's estimated activations (in-flight chunks + backward working space)."""
    table, problems = [], []
    for row in doc["rows"]:
        s = row.get("setting", {})
        if s.get("pp", 1) == 1:
            continue
        m = row.get("measured")
        try:
            meas = float(m["peak"] - m["start"])
            rank = int(row["pp_rank"])
        except (TypeError, KeyError, ValueError):
            problems.append(f"{s.get('name', '?')}: not measured ({str(row.get('error', 'no data'))[:160]})")
            continue
        if not math.isfinite(meas) or meas <= 0:
            problems.append(f"{s['name']} rank {rank}: damaged peak, left out")
            continue
        est = estimate_ranks(make_plan(s))[rank]
        holds_loss = bool(row.get("loss_per_chunk") and any(row["loss_per_chunk"]))
        table.append({"setting": s["name"], "model": s["model"], "recompute": s["recompute"], "pp_rank": rank,
                      "vp": s.get("vp") or 1, "holds_loss": holds_loss, "in_flight": est.in_flight,
                      "measured_mib": meas / MIB, "estimate_mib": est.activations / MIB,
                      "err_pct": 100.0 * (est.activations - meas) / meas, "band_pct": 100 * est.activation_band})
    return table, problems

def static_checks(doc: dict) -> list[str]:
    lines = []
    for row in doc["rows"]:
        if "measured" not in row or row["setting"]["recompute"] != "none" or row["setting"]["mbs"] != 1 \
                or row["setting"]["seq"] != 4096:
            continue
        s = row["setting"]
        per_param = row["param_bytes"] / row["param_count"]
        cache = row["persistent_other"] / gemm_params(row)
        lines.append(f"| {s['model']} | {s['precision']} | {row['param_count'] / 1e9:.3f} | {per_param:.2f} | "
                     f"{row['grad_bytes'] / row['param_count']:.2f} | {row['persistent_other'] / MIB:.0f} | "
                     f"{cache:.2f} |")
    return lines


def plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6))
    for half, marker in (("fit", "o"), ("held-out", "^")):
        pts = [r for r in table if r["per_layer"] and r["half"] == half]
        ax.scatter([r["measured_mib"] for r in pts], [r["estimate_mib"] for r in pts], marker=marker, s=18,
                   label=f"{half} ({len(pts)} layers)", alpha=0.7)
    top = max(r["measured_mib"] for r in table if r["per_layer"]) * 1.05
    ax.plot([0, top], [0, top], color="grey", lw=1, label="estimate = measured")
    ax.set_xlabel("measured: kept after the layer's forward (MiB)")
    ax.set_ylabel("estimate (MiB)")
    ax.set_title("Activation bytes per layer, DeepSeek-V3 / Kimi-K2 at full width\n"
                 "1 x H100, Megatron-Bridge 0.4.2 / Megatron-Core 0.17.1 / TE 2.20.2")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/fullwidth/gpu_fullwidth_memory.json")
    parser.add_argument("--out", type=Path, default=None, help="folder for fullwidth_fit.md / .png (default: none)")
    parser.add_argument("--parallel", type=Path,
                        default=ROOT / "benchmarks/results/fullwidth/gpu_fullwidth_parallel.json",
                        help="the 2-GPU measurements (gpu_fullwidth_parallel.py); fullwidth_parallel.md / .png")
    args = parser.parse_args()
    try:
        doc = json.loads(args.json.read_text())
        rows = doc["rows"]
        if not isinstance(rows, list):
            raise TypeError("rows is not a list")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.json}: not a gpu_fullwidth_memory.py result ({exc})", file=sys.stderr)
        return 2
    table, problems = analyse(doc)
    if not table:
        print(f"error: {args.json}: no measured setting", file=sys.stderr)
        return 1
    prov = doc.get("provenance", {})
    head = ["# Full-width layer memory: estimate vs measured\n",
            f"Measured: {prov.get('date_utc', '?')} on {', '.join(prov.get('gpus', []) or ['?'])}, "
            f"{json.dumps(prov.get('versions', {}))}, torch {prov.get('torch', '?')}; command "
            f"`{prov.get('command', '?')}`; compared by `python3 benchmarks/fullwidth_fit.py`.\n",
            "Method: see the docstrings of benchmarks/gpu_fullwidth_memory.py and benchmarks/fullwidth_fit.py. "
            "MiB = 2^20 B; error = (estimate - measured) / measured.\n"]
    lines = ["| setting | half | kind | measured MiB | estimate MiB | error % |", "|---|---|---|---|---|---|"]
    for r in table:
        note = "" if r["per_layer"] or r["kind"] in ("head", "total") else " (full recompute: whole forward only)"
        lines.append(f"| {r['setting']} | {r['half']} | {r['kind']}{note} | {r['measured_mib']:.0f} | "
                     f"{r['estimate_mib']:.0f} | {r['err_pct']:+.1f} |")
    per_layer = [r for r in table if r["per_layer"] and math.isfinite(r["err_pct"])]
    held = [r for r in per_layer if r["half"] == "held-out"]
    fit = [r for r in per_layer if r["half"] == "fit"]
    totals = [r for r in table if r["kind"] == "total"]
    res = {
        "fullwidth_layer_err_pct_max": max(abs(r["err_pct"]) for r in held),
        "fullwidth_layer_err_pct_max_fit": max(abs(r["err_pct"]) for r in fit),
        "fullwidth_forward_err_pct_max": max(abs(r["err_pct"]) for r in totals if r["recompute"] != "full"),
        "fullwidth_forward_err_pct_max_full_recompute": max(abs(r["err_pct"]) for r in totals
                                                             if r["recompute"] == "full"),
        "fullwidth_backward_peak_err_pct_max": max(abs(r["err_pct"]) for r in table
                                                   if r["kind"] == "peak" and r["recompute"] != "full"),
        "fullwidth_backward_peak_err_pct_max_full_recompute": max(abs(r["err_pct"]) for r in table
                                                                  if r["kind"] == "peak" and r["recompute"] == "full"),
    }
    summary = [f"- per-layer (dense, MoE, MTP) error over the {len(held)} held-out layers: max |error| "
               f"{res['fullwidth_layer_err_pct_max']:.2f} %; over the {len(fit)} fit layers "
               f"{res['fullwidth_layer_err_pct_max_fit']:.2f} %",
               f"- whole forward (embedding + layers + head): max |error| {res['fullwidth_forward_err_pct_max']:.2f} "
               f"% without full recompute; with full recompute "
               f"{res['fullwidth_forward_err_pct_max_full_recompute']:.1f} % (the estimate keeps one layer input per "
               "layer; the measured forward keeps less)",
               f"- backward peak over the start (activations + the first backward's working space): max |error| "
               f"{res['fullwidth_backward_peak_err_pct_max']:.2f} % without full recompute, "
               f"{res['fullwidth_backward_peak_err_pct_max_full_recompute']:.1f} % with it"]
    static = ["| model | precision | params (B) | weight B/param | grad B/param | other persistent MiB | "
              "other persistent B per GEMM param |", "|---|---|---|---|---|---|---|", *static_checks(doc)]
    runtime = doc.get("runtime", {})
    rt = ", ".join(f"{k} {v / MIB:.0f} MiB" for k, v in runtime.items())
    text = "\n".join(head + ["## Summary\n", *summary, "",
                             f"Runtime outside the allocator on this host (cumulative): {rt}.", "",
                             "## Static terms (s4096 b1, no recompute)\n", *static, "",
                             "## Every layer\n", *lines, ""]
                     + (["## Left out\n", *(f"- {p}" for p in problems), ""] if problems else []))
    print("\n".join(summary))
    for p in problems:
        print(f"left out: {p}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fullwidth_fit.md").write_text(text)
        plot(table, args.out / "fullwidth_fit.png")
        print(f"wrote {args.out / 'fullwidth_fit.md'} and {args.out / 'fullwidth_fit.png'}")
    if args.parallel is not None and args.parallel.is_file():
        res.update(parallel_report(args.parallel, args.out))
    for k, v in res.items():
        print(f"RESULT {k}={v:.2f} %")
    return 0


def parallel_report(path: Path, out: Path | None) -> dict[str, float]:
    """The 2-GPU measurements (benchmarks/gpu_fullwidth_parallel.py): TP2 + SP per layer and peak, PP per rank."""
    doc = json.loads(path.read_text())
    tp_doc = {"rows": [r for r in doc["rows"] if r.get("setting", {}).get("tp", 1) > 1]}
    tp, tp_problems = analyse(tp_doc)
    pp, pp_problems = analyse_pipeline(doc)
    layers = [r for r in tp if r["per_layer"] and math.isfinite(r["err_pct"])]
    peaks = [r for r in tp if r["kind"] == "peak" and r["recompute"] != "full"]
    loss_ranks = [r for r in pp if r["holds_loss"]]
    others = [r for r in pp if not r["holds_loss"]]
    res = {"fullwidth_tp2_layer_err_pct_max": max(abs(r["err_pct"]) for r in layers),
           "fullwidth_tp2_backward_peak_err_pct_max": max(abs(r["err_pct"]) for r in peaks),
           "fullwidth_pp_loss_rank_peak_err_pct_max": max(abs(r["err_pct"]) for r in loss_ranks),
           "fullwidth_pp_first_rank_peak_err_pct_max": max(abs(r["err_pct"]) for r in others)}
    summary = [
        f"- TP2 + sequence parallel, {len(layers)} layers (dense, MoE, MTP; both ranks): max |error| "
        f"{res['fullwidth_tp2_layer_err_pct_max']:.2f} %; backward peak "
        f"{res['fullwidth_tp2_backward_peak_err_pct_max']:.2f} % without full recompute",
        f"- PP2 / PP2-VP2 (4 micro-batches, Megatron-Core's schedules), the rank holding the loss: max |error| "
        f"{res['fullwidth_pp_loss_rank_peak_err_pct_max']:.2f} % over {len(loss_ranks)} rank peaks; the first rank "
        f"(embedding, no loss): {min(r['err_pct'] for r in others):+.1f} .. {max(r['err_pct'] for r in others):+.1f} % "
        f"over {len(others)} (its band: {others[0]['band_pct']:.0f} % of activations)"]
    print("\n".join(summary))
    calls = doc.get("calls", [])
    prov = "; ".join(f"{c.get('settings')}: {c['provenance'].get('date_utc', '?')} on "
                     f"{', '.join(c['provenance'].get('gpus', []))}, "
                     f"{json.dumps(c['provenance'].get('versions', {}))}, "
                     f"`{c['provenance'].get('command', '?')}`" for c in calls)
    lines = ["# Full-width memory on 2 GPUs: estimate vs measured\n", f"Measured: {prov}. Compared by "
             "`python3 benchmarks/fullwidth_fit.py --out benchmarks/results/fullwidth`.\n",
             "Method: benchmarks/gpu_fullwidth_parallel.py's docstring. MiB = 2^20 B; error = (estimate - measured) "
             "/ measured.\n", "## Summary\n", *summary, "",
             "## TP2 + SP: every layer and the backward peak (rank 0 and rank 1)\n",
             "| setting | rank | kind | measured MiB | estimate MiB | error % |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['rank']} | {r['kind']} | {r['measured_mib']:.0f} | {r['estimate_mib']:.0f} | "
              f"{r['err_pct']:+.1f} |" for r in tp]
    lines += ["", "## PP2 / PP2-VP2: each rank's forward-backward peak\n",
              "| setting | pp rank | holds the loss | chunks in flight (estimate) | measured MiB | estimate MiB | "
              "error % |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['pp_rank']} | {'yes' if r['holds_loss'] else 'no'} | {r['in_flight']} | "
              f"{r['measured_mib']:.0f} | {r['estimate_mib']:.0f} | {r['err_pct']:+.1f} |" for r in pp]
    problems = tp_problems + pp_problems
    if problems:
        lines += ["", "## Left out\n", *(f"- {p}" for p in problems)]
    if out is not None:
        (out / "fullwidth_parallel.md").write_text("\n".join(lines) + "\n")
        plot_parallel(layers + peaks, pp, out / "fullwidth_parallel.png")
        print(f"wrote {out / 'fullwidth_parallel.md'} and {out / 'fullwidth_parallel.png'}")
    return res


def plot_parallel(tp: list[dict], pp: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, groups, title in (
            (axes[0], (("layers", [r for r in tp if r["kind"] != "peak"], "o"),
                       ("backward peaks", [r for r in tp if r["kind"] == "peak"], "s")),
             "TP2 + sequence parallel: per layer and backward peak"),
            (axes[1], (("rank holding the loss", [r for r in pp if r["holds_loss"]], "o"),
                       ("first rank (embedding)", [r for r in pp if not r["holds_loss"]], "^")),
             "PP2 / PP2-VP2: each rank's forward-backward peak")):
        top = 0.0
        for label, rows, marker in groups:
            ax.scatter([r["measured_mib"] for r in rows], [r["estimate_mib"] for r in rows], marker=marker, s=22,
                       alpha=0.75, label=f"{label} ({len(rows)})")
            top = max([top, *(r["measured_mib"] * 1.05 for r in rows)])
        ax.plot([0, top], [0, top], color="grey", lw=1, label="estimate = measured")
        ax.set_xlabel("measured (MiB)")
        ax.set_ylabel("estimate (MiB)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("DeepSeek-V3 / Kimi-K2 at full width on 2 x H200: Megatron-Bridge 0.4.2 / Megatron-Core 0.17.1 / "
                 "TE 2.20.2", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
