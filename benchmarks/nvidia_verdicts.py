"""NVIDIA's configurations through ``cloudai-mbridge preflight``: our estimate, its band, its verdict and
Megatron-Bridge's own estimator, one table per family:

- ``--family dsv3_042``: Megatron-Bridge 0.4.2's DeepSeek-V3 perf-script configurations (conf/test/nvidia_dsv3_*,
  scenarios nvidia_dsv3_<gpu>.toml; benchmarks/results/fullwidth/nvidia_dsv3_verdicts.md);
- ``--family kimi_042``: Megatron-Bridge 0.4.2's Kimi-K2 perf-script configurations (conf/test/nvidia_kimi_k2_*,
  scenarios nvidia_kimi_k2_<gpu>.toml, no B300 in 0.4.2; benchmarks/results/fullwidth/nvidia042_kimi_verdicts.md);
- ``--family recipes_062``: every DeepSeek-V3 and Kimi-K2 perf recipe of Megatron-Bridge 0.6.2 (conf/test/nvidia062_*,
  scenarios nvidia062_<gpu>.toml, VR200 included; benchmarks/results/fullwidth/nvidia062_verdicts.md).

Method: for each GPU, the real CLI's preflight on conf/system/<system>.toml with the family's scenario (a child
process, its output folder a temporary one); the table is read from its preflight.csv. No GPU. Units: GiB (2^30 B)
per GPU. Prints the table and ``RESULT <family>_rejected=<n> configurations`` (the number whose memory verdict is
"does not fit" or that a rule refused).

Run: python3 benchmarks/nvidia_verdicts.py [--family dsv3_042|kimi_042|recipes_062] [--out <file.md>]
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NVIDIA = [("h100", "slurm_h100_ib"), ("b200", "slurm_b200_ib"), ("b300", "slurm_b300_ib"),
          ("gb200", "slurm_gb200_nvl72"), ("gb300", "slurm_gb300_nvl72")]
# family -> (scenario / test name prefix, GPUs, what the table is)
FAMILIES = {
    "dsv3_042": ("nvidia_dsv3_", NVIDIA, "Megatron-Bridge 0.4.2 `scripts/performance/configs/deepseek/"
                 "deepseek_workload_base_configs.py`, every in-scope DeepSeek-V3 configuration "
                 "(conf/test/nvidia_dsv3_*.toml)"),
    "kimi_042": ("nvidia_kimi_k2_", [g for g in NVIDIA if g[0] != "b300"],
                 "Megatron-Bridge 0.4.2 `scripts/performance/configs/kimi/kimi_workload_base_configs.py`, every "
                 "Kimi-K2 configuration (conf/test/nvidia_kimi_k2_*.toml; 0.4.2 has none for B300)"),
    "recipes_062": ("nvidia062_", [*NVIDIA, ("vr200", "slurm_vr200_nvl72")],
                    "Megatron-Bridge 0.6.2 `src/megatron/bridge/perf_recipes/`, every DeepSeek-V3 and Kimi-K2 recipe "
                    "(conf/test/nvidia062_*.toml, written from the wheel's source by tests/bridge062.py)"),
}


def rows_for(gpu: str, system: str, prefix: str = "nvidia_dsv3_") -> list[dict[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(Path(tmp) / "debug.log"), "preflight",
               "--system-config", str(ROOT / "conf" / "system" / f"{system}.toml"), "--test-scenario",
               str(ROOT / "conf" / "test_scenario" / f"{prefix}{gpu}.toml"), "--output-dir", str(out)]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=600)
        path = out / "preflight.csv"
        if not path.is_file():
            sys.exit(f"error: preflight for {gpu} wrote no table (exit {proc.returncode}): {proc.stdout[-2000:]}"
                     f"{proc.stderr[-2000:]}")
        with path.open() as f:
            return list(csv.DictReader(f))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="dsv3_042")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    prefix, gpus, what = FAMILIES[args.family]
    lines = ["| GPU | test | ours GiB / capacity | band | verdict | Bridge's estimate GiB |",
             "|---|---|---|---|---|---|"]
    rejected = 0
    for gpu, system in gpus:
        for r in rows_for(gpu, system, prefix):
            name = r["test"].removeprefix(prefix).removeprefix(f"{gpu}_")
            if r["verdict"] != "ok" or r["memory_verdict"] == "does not fit":
                rejected += 1
            refused = "" if r["verdict"] == "ok" else f"{r['verdict']} by `{r.get('rule') or '?'}`"
            memory = " ".join(x for x in (r["memory_verdict"], f"({refused})" if refused and r["memory_verdict"]
                                          else refused) if x)
            band = f"+/- {r['memory_band_pct']} %" if r["memory_band_pct"] else "-"
            lines.append(f"| {gpu} | {name} | {r['memory_gib_per_gpu'] or '-'} | {band} | {memory} | "
                         f"{r['bridge_estimate_gib'] or '-'} |")
    head = ["# NVIDIA's configurations through `cloudai-mbridge preflight`\n",
            f"{what}, on its system file; command per GPU: "
            "`cloudai-mbridge preflight --system-config conf/system/<system>.toml --test-scenario "
            f"conf/test_scenario/{prefix}<gpu>.toml`; this table: `python3 benchmarks/nvidia_verdicts.py --family "
            f"{args.family} --out {args.out or '<file.md>'}`.",
            "Ours: `plan/memory.py` on the busiest pipeline rank, with its error band; Bridge: its own "
            "`estimate_training_memory` (0.6.2, `plan/bridge_estimate.py`), which ignores precision, recompute "
            "modules, dispatcher buffers and runtime. Checked in CI by tests/test_production_configs.py.\n"]
    text = "\n".join(head + lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    print(f"RESULT {args.family}_rejected={rejected} configurations")
    return 0 if rejected == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
