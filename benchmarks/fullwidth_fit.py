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

from cloudai_mbridge.plan.memory import _padded_vocab, _te_activations  # noqa: E402

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
        for kind in ("dense", "moe", "mtp", "head", "total"):
            if kind not in meas:
                continue
            m, e = meas[kind], est[kind]
            per_layer = kind in ("dense", "moe", "mtp") and not full
            err = 100.0 * (e - m) / m if m > 0 else float("nan")
            table.append({"setting": s["name"], "model": s["model"], "precision": s["precision"],
                          "recompute": s["recompute"], "shape": f"s{s['seq']} b{s['mbs']}",
                          "half": "held-out" if heldout(s) else "fit", "kind": kind, "measured_mib": m / MIB,
                          "estimate_mib": e / MIB, "err_pct": err, "per_layer": per_layer})
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
    }
    summary = [f"- per-layer (dense, MoE, MTP) error over the {len(held)} held-out layers: max |error| "
               f"{res['fullwidth_layer_err_pct_max']:.2f} %; over the {len(fit)} fit layers "
               f"{res['fullwidth_layer_err_pct_max_fit']:.2f} %",
               f"- whole forward (embedding + layers + head): max |error| {res['fullwidth_forward_err_pct_max']:.2f} "
               f"% without full recompute; with full recompute "
               f"{res['fullwidth_forward_err_pct_max_full_recompute']:.1f} % (the estimate keeps one layer input per "
               "layer; the measured forward keeps less)"]
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
    for k, v in res.items():
        print(f"RESULT {k}={v:.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
