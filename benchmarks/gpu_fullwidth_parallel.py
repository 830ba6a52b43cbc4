"""Full-width layer memory on two GPUs: the TP split with sequence parallelism, and the pipeline's in-flight chunks.

The one-GPU measurement (``gpu_fullwidth_memory.py``) fixes what a layer keeps per micro-batch at tp = pp = 1. Two
things it cannot see are checked here, on one host with 2 GPUs, one process per GPU (``torchrun --nproc-per-node 2``),
with the same models (DeepSeek-V3 / Kimi-K2 at full width, 4 layers: 2 dense + 2 MoE, 8 experts, top-8) built by the
same bridge-engine path (Megatron-Bridge's recipe, Transformer Engine layers, Bridge's precision presets):

- ``tp2sp-*``: TP = 2 with sequence parallelism (ep = etp = 1: the experts are whole on each rank, as in NVIDIA's
  DeepSeek-V3 H100 configurations' TP2 / ETP1). Per-layer marks exactly as in the one-GPU script (forward hooks read
  ``memory_allocated`` after every layer; the difference is what the layer left for backward) on every rank.
- ``pp2-*`` / ``pp2vp2-*``: PP = 2 (vp 1 or 2, the payload's derived layout for the slice: embedding first, MTP and
  the loss last) under Megatron-Core's own schedule (``get_forward_backward_func``: 1F1B, or the interleaved one), 4
  micro-batches. Per rank: ``max_memory_allocated`` during one whole forward-backward minus what was allocated before
  it (weights and gradients, which the warm-up made), i.e. the in-flight activations plus the backward's working space
  at the schedule's peak. Also the number of forward passes whose outputs were alive at that peak is not observable
  directly; the CPU side (``benchmarks/fullwidth_fit.py --parallel``) sets the measured peak against the estimate's
  in-flight chunk count times its per-chunk bytes.

Per setting: two warm-up iterations, then one measured one. No DDP wrapper (TE's fused wgrad accumulation is off),
no optimizer: the static terms are the one-GPU script's. Units: bytes in the JSON.

Run (GPU host with 2 GPUs, the bridge stack installed: benchmarks/gpu_setup.sh):
  torchrun --nproc-per-node 2 benchmarks/gpu_fullwidth_parallel.py --out DIR [--only NAME ...] [--budget-s S]
Writes DIR/gpu_fullwidth_parallel.json (rank 0: every rank's rows, gathered). A failed setting is a row with its
error; the others still run. ``--list`` needs no GPU; otherwise a host without 2 CUDA GPUs or without the bridge
stack gets one line and exit status 3 (2 when not started by torchrun), before anything is written.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from functools import partial
from pathlib import Path

from gpu_fullwidth_memory import BRIDGE_STACK, build, measure, result_document  # benchmarks/ is sys.path[0]
from provenance import require_gpu

MIB = 1 << 20


def settings(models: list[str]) -> list[dict]:
    out: list[dict] = []
    for model in models:
        for precision, rcs in (("bf16", ("none", "mla_up_proj,mlp", "moe_act", "moe", "full")),
                               ("fp8_tensorwise", ("none", "mla_up_proj,mlp"))):
            for rc in rcs:
                out.append({"model": model, "precision": precision, "recompute": rc, "seq": 4096, "mbs": 1,
                            "tp": 2})
        out.append({"model": model, "precision": "bf16", "recompute": "none", "seq": 2048, "mbs": 2, "tp": 2})
    for model in models:
        for vp in (None, 2):
            for rc in ("none", "mla_up_proj,mlp"):
                out.append({"model": model, "precision": "bf16", "recompute": rc, "seq": 4096, "mbs": 1, "pp": 2,
                            "vp": vp, "microbatches": 4})
    for s in out:
        par = f"tp{s['tp']}sp" if s.get("tp", 1) > 1 else f"pp{s['pp']}" + (f"vp{s['vp']}" if s.get("vp") else "")
        s["name"] = f"{par}-{s['model']}-{s['precision']}-{s['recompute'].replace(',', '+')}-s{s['seq']}b{s['mbs']}"
    return out


def measure_pipeline(s: dict, work: Path) -> dict:
    """One forward-backward of ``microbatches`` micro-batches through Megatron-Core's schedule; the rank's peak."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    # A backward outside the schedule (the tp settings before this one, in this process) leaves the aux-loss scale a
    # 0-dim tensor, into which the schedule's copy_ of its [1]-shaped scale cannot broadcast: start as a fresh
    # training process does.
    MoEAuxLossAutoScaler.main_loss_backward_scale = None
    row: dict = {"setting": s}
    torch.cuda.reset_peak_memory_stats()
    base0 = torch.cuda.memory_allocated()
    chunks, fields, lines = build(s, work, print, all_chunks=True)
    row["provider"] = fields
    row["payload_lines"] = lines
    row["chunks"] = len(chunks)
    params = sum(p.numel() * p.element_size() for c in chunks for p in c.parameters())
    row["param_bytes"] = params
    row["param_count"] = sum(p.numel() for c in chunks for p in c.parameters())
    row["layers_per_chunk"] = [len(c.module.decoder.layers) for c in chunks]
    row["mtp_per_chunk"] = [getattr(c.module, "mtp", None) is not None for c in chunks]
    row["loss_per_chunk"] = [bool(getattr(c.module, "post_process", False)) for c in chunks]
    row["embedding_per_chunk"] = [bool(getattr(c.module, "pre_process", False)) for c in chunks]
    b, seq, m = s["mbs"], s["seq"], s["microbatches"]
    vocab = fields["vocab_size"]
    gen = torch.Generator(device="cuda").manual_seed(1234)
    batches = [{"tokens": torch.randint(0, vocab, (b, seq), device="cuda", generator=gen),
                "labels": torch.randint(0, vocab, (b, seq), device="cuda", generator=gen)} for _ in range(m)]
    position_ids = torch.arange(seq, device="cuda").unsqueeze(0).expand(b, -1)
    loss_mask = torch.ones(b, seq, device="cuda", dtype=torch.float32)
    for c in chunks:
        c.train()

    def loss_func(output):
        loss = (output.float() * loss_mask).sum() / loss_mask.sum()
        return loss, {"lm loss": loss.detach()}

    def forward_step(data_iterator, model):
        batch = next(data_iterator)
        out = model(batch["tokens"], position_ids, None, labels=batch["labels"], loss_mask=loss_mask)
        return out, partial(loss_func)

    fb = get_forward_backward_func()

    def step(record: bool) -> dict:
        iters = [iter(batches) for _ in chunks]
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        fb(forward_step_func=forward_step, data_iterator=iters if len(chunks) > 1 else iters[0],
           model=chunks if len(chunks) > 1 else chunks[0], num_microbatches=m, seq_length=seq, micro_batch_size=b,
           forward_only=False)
        torch.cuda.synchronize()
        return {"start": start, "peak": torch.cuda.max_memory_allocated(), "end": torch.cuda.memory_allocated(),
                "seconds": time.perf_counter() - t0}

    warm = [step(False), step(False)]
    row["grad_bytes"] = sum(p.grad.numel() * p.grad.element_size() for c in chunks for p in c.parameters()
                            if p.grad is not None)
    row["warmup"] = warm
    row["measured"] = step(True)
    row["persistent_other"] = row["measured"]["start"] - base0 - params - row["grad_bytes"]
    row["pp_rank"] = parallel_state.get_pipeline_model_parallel_rank()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/fullwidth_parallel"))
    parser.add_argument("--models", nargs="+", default=["deepseek_v3", "kimi_k2"])
    parser.add_argument("--only", nargs="*", default=None, help="setting names (or substrings) to run")
    parser.add_argument("--list", action="store_true", help="print the settings and exit")
    parser.add_argument("--budget-s", type=float, default=400.0, help="stop starting new settings after this")
    args = parser.parse_args()
    todo = settings(args.models)
    if args.only:
        todo = [s for s in todo if any(o in s["name"] for o in args.only)]
    if args.list:
        for s in todo:
            print(s["name"])
        print(f"{len(todo)} settings")
        return 0
    require_gpu(__file__, 2, BRIDGE_STACK)
    if "RANK" not in os.environ:
        print(f"error: {Path(__file__).name}: start it with torchrun --nproc-per-node 2 (one process per GPU)",
              file=sys.stderr)
        return 2
    import torch
    from megatron.core import parallel_state

    rank = int(os.environ.get("RANK", 0))

    def say(line: str) -> None:
        print(f"[rank {rank}] {line}", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_fullwidth_parallel.json"
    doc = result_document(__doc__, say)
    world = torch.distributed.get_world_size()
    t_start = time.perf_counter()
    current = None
    for i, s in enumerate(todo):
        # the same decision on every rank: rank 0's clock
        flag = torch.tensor([time.perf_counter() - t_start > args.budget_s], device="cuda", dtype=torch.int32)
        torch.distributed.broadcast(flag, 0)
        if flag.item():
            row = {"setting": s, "error": "skipped: time budget"}
        else:
            par = (s.get("tp", 1), s.get("pp", 1), s.get("vp"))
            if par != current and parallel_state.is_initialized():
                parallel_state.destroy_model_parallel()
            current = par
            t0 = time.perf_counter()
            work = args.out / f"hf_work_r{rank}"
            try:
                if s.get("pp", 1) > 1:
                    row = measure_pipeline(s, work)
                    m = row["measured"]
                    say(f"[{i + 1}/{len(todo)}] {s['name']}: pp rank {row['pp_rank']} chunks {row['chunks']} layers "
                        f"{row['layers_per_chunk']} peak +{(m['peak'] - m['start']) / MIB:.0f} MiB over "
                        f"{m['start'] / MIB:.0f}; {time.perf_counter() - t0:.1f} s")
                else:
                    row = measure(s, work, say)
                    m = row["measured"]
                    marks = " ".join(f"{n}={v / MIB:.0f}" for n, v in m["marks"])
                    say(f"[{i + 1}/{len(todo)}] {s['name']}: fwd kept {(m['after_forward'] - m['start']) / MIB:.0f} "
                        f"MiB, bwd peak +{(m['backward_peak'] - m['start']) / MIB:.0f}; {marks}; "
                        f"{time.perf_counter() - t0:.1f} s")
            except Exception as e:  # a failed setting is a row, the others still run
                row = {"setting": s, "error": f"{type(e).__name__}: {e}"[:2000],
                       "traceback": traceback.format_exc()[-3000:]}
                say(f"[{i + 1}/{len(todo)}] {s['name']}: FAILED {row['error'][:400]}")
        row["rank"] = rank
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, row)
        doc["rows"].extend(gathered)
        gc.collect()
        torch.cuda.empty_cache()
        if rank == 0:
            path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    ok = sum(1 for r in doc["rows"] if "measured" in r)
    say(f"done: {ok} rank-rows measured of {len(todo) * world} -> {path}")
    torch.distributed.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
