"""Full-width layer memory on one GPU: what one rank of a production DeepSeek-V3 / Kimi-K2 job keeps per layer.

Method (GPU side). For each setting (model slice x precision x recompute x shape) the payload's own bridge-engine
path builds the model: ``launch/training.py training_config`` -> ``payload/train/bridge.py build_container``
(Megatron-Bridge's DeepSeek-V3 recipe, Transformer Engine layers, the recipe's fusions), the mixed-precision preset
is applied as Bridge's ``runtime_config_update`` does, and ``provider.provide_distributed_model(wrap_with_ddp=False)``
builds a Float16Module(GPTModel) on the GPU. The slices are the real widths (hidden 7168, MLA q_lora 1536 / kv_lora
512 / qk 128+64 / v 128, dense ffn 18432, moe_ffn 2048, one shared expert of 2048, the real vocabularies, DeepSeek-V3
128 heads + 1 MTP layer, Kimi-K2 64 heads) with 4 decoder layers, the first two dense, and 8 routed experts with
top-8 routing: every token goes to every local expert, so the rank's expert input is s*b*k token copies, exactly
what balanced routing gives one rank of any EP split (256/32 = 384/48 = 8 experts per rank; fewer experts per rank
change only the expert weights, which are counted from the parameters). tp = pp = ep = 1, no sequence parallelism.

Per setting: two warm-up iterations (forward + backward; FP8 scales, TE workspaces and weight casts appear there),
then one measured iteration. ``torch.cuda.memory_allocated()`` is read after every decoder layer's, the MTP layer's,
the final norm's and the output layer's forward (module forward hooks), and after the loss; the difference between
consecutive marks is what that module left alive for backward (its saved tensors plus its output). Also recorded: the
forward's and the backward's peaks (``max_memory_allocated`` reset before each), the parameter and gradient bytes,
and the persistent bytes that are neither (FP8 weight copies, workspaces) after the warm-up. Units: bytes in the
JSON, MiB in the tables.

Runtime (outside the allocator, ``mem_get_info`` used - ``memory_reserved``): after the CUDA context, after NCCL's
first collective on the one-rank world, after the first cuBLAS GEMM and after the first model iteration.

Run (GPU host, the bridge stack installed: benchmarks/gpu_setup.sh): python3 benchmarks/gpu_fullwidth_memory.py
--out DIR [--models deepseek_v3 kimi_k2] [--only NAME ...] [--list]. Writes DIR/gpu_fullwidth_memory.json (one row per
setting; a failed setting is a row with its error). The comparison with the estimate is
``benchmarks/fullwidth_fit.py`` (CPU). ``--list`` needs no GPU; otherwise a host without a CUDA GPU or without the
bridge stack (megatron.bridge, megatron.core, transformer_engine) gets one line and exit status 3, before anything is
written.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

from provenance import provenance, require_gpu  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudai_mbridge.catalog import get_gpu, get_model  # noqa: E402
from cloudai_mbridge.launch.training import training_config  # noqa: E402
from cloudai_mbridge.plan import TrainingPlan  # noqa: E402

MIB = 1 << 20
SLICE_LAYERS = 4
SLICE_DENSE = 2
SLICE_EXPERTS = 8

# recompute settings: "none", "full", or the selective module list
BF16_RECOMPUTE = ("none", "core_attn", "mla_up_proj", "mlp", "moe_act", "moe", "layernorm", "shared_experts",
                  "mla_up_proj,mlp", "mla_up_proj,moe_act", "moe_act,layernorm,mla_up_proj", "full")
FP8_RECOMPUTE = ("none", "mla_up_proj,mlp", "moe_act", "moe", "full")
PRECISIONS = ("bf16", "fp8_tensorwise", "fp8_blockwise")
HELDOUT_RECOMPUTE = ("none", "mla_up_proj,mlp", "full")
HELDOUT_SHAPES = ((4096, 2), (2048, 1))
BRIDGE_STACK = ("megatron.bridge", "megatron.core", "transformer_engine")  # what building the model imports


def slice_spec(model: str):
    """The model at full width with SLICE_LAYERS layers, SLICE_DENSE dense, SLICE_EXPERTS experts, ungrouped routing
    (group-limited routing needs more groups than 8 experts make). Named *_slice; the DeepSeek-V3 recipe builds it
    with these shapes (is_proxy: catalog_shape is applied), as it does for the proxies."""
    base = get_model(model)
    return dataclasses.replace(
        base, name=f"{model}_slice", hf_id=None, num_layers=SLICE_LAYERS, first_k_dense=SLICE_DENSE,
        num_experts=SLICE_EXPERTS, router_num_groups=1, router_group_topk=1, is_proxy=True,
        max_position_embeddings=max(base.max_position_embeddings, 4096), recipe_pp_vp=frozenset({(1, 1)}))


def settings(models: list[str]) -> list[dict]:
    out = []
    for model in models:
        for precision in PRECISIONS:
            for rc in BF16_RECOMPUTE if precision == "bf16" else FP8_RECOMPUTE:
                out.append({"model": model, "precision": precision, "recompute": rc, "seq": 4096, "mbs": 1})
            for seq, mbs in HELDOUT_SHAPES:
                for rc in HELDOUT_RECOMPUTE:
                    out.append({"model": model, "precision": precision, "recompute": rc, "seq": seq, "mbs": mbs})
    for s in out:
        s["name"] = f"{s['model']}-{s['precision']}-{s['recompute'].replace(',', '+')}-s{s['seq']}b{s['mbs']}"
    return out


def make_plan(s: dict) -> TrainingPlan:
    rc = s["recompute"]
    kind = rc if rc in ("none", "full") else "selective"
    modules = tuple(rc.split(",")) if kind == "selective" else ()
    # tp / pp / vp / microbatches: the 2-GPU settings of benchmarks/gpu_fullwidth_parallel.py (1 GPU: all 1)
    tp, pp, vp = s.get("tp", 1), s.get("pp", 1), s.get("vp")
    model = slice_spec(s["model"])
    if pp > 1:
        model = dataclasses.replace(model, recipe_pp_vp=frozenset({(pp, vp or 1)}))
    return TrainingPlan(
        model=model, gpu=get_gpu("h100"), num_nodes=1, gpus_per_node=tp * pp, tp=tp, pp=pp, vp=vp, cp=1, ep=1,
        etp=1, mbs=s["mbs"], gbs=s["mbs"] * s.get("microbatches", 1), seq_length=s["seq"], train_iters=3,
        dispatcher="alltoall", recompute=kind, recompute_modules=modules, precision=s["precision"],
        force_balanced_routing=False, sequence_parallel=tp > 1, transformer_impl="transformer_engine",
        precision_aware_optimizer=True, gradient_accumulation_fusion=False)  # build() turns it off: no DDP here


def outside_allocator() -> int:
    import torch

    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def build(s: dict, work: Path, say, all_chunks: bool = False):
    """The payload's container for the setting, precision applied, model built (no DDP wrapper)."""
    from cloudai_mbridge.payload import hf_config
    from cloudai_mbridge.payload.train.bridge import build_container
    from cloudai_mbridge.payload.train.config import check_config

    plan = make_plan(s)
    cfg = training_config(plan, data="mock", seed=1234, log_interval=1, engine="bridge", output_dir=str(work),
                          checkpoint_dir=None, hf_model_id=None)
    cfg = check_config(json.loads(json.dumps(cfg)))  # what the payload's load_config hands its engines
    hub = hf_config.prepare(cfg, work)
    lines: list[str] = []
    _, container = build_container(cfg, str(hub.model_dir), report=lines.append)
    mixed = container.mixed_precision
    if mixed is not None:
        if isinstance(mixed, str):
            from megatron.bridge.training.mixed_precision import get_mixed_precision_config

            mixed = get_mixed_precision_config(mixed)
        mixed.finalize()
        mixed.setup(container.model, container.optimizer, container.ddp)
    provider = container.model
    # no DDP wrapper: TE's fused wgrad accumulation writes into main_grad, which only DDP's buffers provide
    provider.gradient_accumulation_fusion = False
    provider.finalize()
    from megatron.core import parallel_state

    if not parallel_state.is_initialized():
        provider.initialize_model_parallel(seed=1234)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False, bf16=True)
    model = chunks if all_chunks else chunks[0]
    fields = {k: _plain(getattr(provider, k, None)) for k in (
        "num_layers", "hidden_size", "num_attention_heads", "num_moe_experts", "moe_router_topk", "moe_layer_freq",
        "mtp_num_layers", "fp8", "fp8_recipe", "recompute_granularity", "recompute_modules", "recompute_method",
        "moe_grouped_gemm", "moe_permute_fusion", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
        "moe_shared_expert_overlap", "moe_token_dispatcher_type", "attention_backend", "transformer_impl",
        "apply_rope_fusion", "gradient_accumulation_fusion", "seq_length", "vocab_size")}
    return model, fields, lines


def _plain(v):
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def measure(s: dict, work: Path, say) -> dict:
    import torch

    row: dict = {"setting": s}
    torch.cuda.reset_peak_memory_stats()
    base0 = torch.cuda.memory_allocated()
    model, fields, lines = build(s, work, say)
    row["provider"] = fields
    row["payload_lines"] = lines
    gpt = model.module
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    row["param_count"] = sum(p.numel() for p in model.parameters())
    row["param_bytes"] = params
    row["after_build"] = torch.cuda.memory_allocated() - base0
    marks: list[tuple[str, int]] = []

    def hook(name):
        def fn(_module, _inputs, _output):
            marks.append((name, torch.cuda.memory_allocated()))
        return fn

    handles = []
    for i, layer in enumerate(gpt.decoder.layers):
        kind = "moe" if type(layer.mlp).__name__ == "MoELayer" else "dense"
        handles.append(layer.register_forward_hook(hook(f"layer{i}:{kind}")))
    row["layer_classes"] = sorted({type(m).__name__ for m in gpt.modules() if "TE" in type(m).__name__
                                   or "Grouped" in type(m).__name__ or "Fused" in type(m).__name__})
    mtp = getattr(gpt, "mtp", None)
    if mtp is not None:
        for i, layer in enumerate(mtp.layers):
            handles.append(layer.register_forward_hook(hook(f"mtp{i}")))
    if getattr(gpt.decoder, "final_layernorm", None) is not None:
        handles.append(gpt.decoder.final_layernorm.register_forward_hook(hook("final_norm")))
    handles.append(gpt.output_layer.register_forward_hook(hook("output_layer")))

    b, seq = s["mbs"], s["seq"]
    vocab = fields["vocab_size"]
    gen = torch.Generator(device="cuda").manual_seed(1234)
    tokens = torch.randint(0, vocab, (b, seq), device="cuda", generator=gen)
    labels = torch.randint(0, vocab, (b, seq), device="cuda", generator=gen)
    position_ids = torch.arange(seq, device="cuda").unsqueeze(0).expand(b, -1)
    loss_mask = torch.ones(b, seq, device="cuda", dtype=torch.float32)
    model.train()

    def step(record: bool) -> dict:
        marks.clear()
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if s.get("first_microbatch"):  # as Megatron's schedules do: TE casts the weights once and keeps them
            gpt.set_is_first_microbatch()
        out = model(tokens, position_ids, None, labels=labels, loss_mask=loss_mask)
        loss = (out.float() * loss_mask).sum() / loss_mask.sum()
        torch.cuda.synchronize()
        fwd_marks = list(marks)  # full recompute re-runs the layers (and their hooks) in backward
        after_fwd = torch.cuda.memory_allocated()
        fwd_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        bwd_peak = torch.cuda.max_memory_allocated()
        del out, loss
        end = torch.cuda.memory_allocated()
        rec = {"start": start, "after_forward": after_fwd, "forward_peak": fwd_peak, "backward_peak": bwd_peak,
               "end": end, "seconds": t1 - t0}
        if record:
            rec["marks"] = [(n, m - start) for n, m in fwd_marks]
        return rec

    warm = [step(False), step(False)]
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    row["grad_bytes"] = grads
    row["warmup"] = warm
    row["measured"] = step(True)
    # persistent, neither parameters nor gradients: FP8 weight casts / transposes, TE and MoE workspaces
    row["persistent_other"] = row["measured"]["start"] - base0 - params - grads
    row["outside_allocator_after"] = outside_allocator()
    for h in handles:
        h.remove()
    # the model and the inputs go with this frame (gc + empty_cache in main)
    return row


def runtime_stages(say) -> dict:
    import torch

    out = {}
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.zeros(1, device="cuda")
    out["cuda_context"] = outside_allocator()
    if not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29561")
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.ones(1 << 20, device="cuda")
    torch.distributed.all_reduce(x)
    out["nccl_world_first_collective"] = outside_allocator()
    a = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    out["cublas_first_gemm"] = outside_allocator()
    del a, x
    say("runtime (outside the allocator, MiB): " + ", ".join(f"{k} {v / MIB:.0f}" for k, v in out.items()))
    return out


def result_document(method: str | None, say) -> dict:
    """A results JSON's head: the method, the provenance with the stack's versions, the runtime stages (on this
    process's GPU); the rows follow. Shared by this script and gpu_fullwidth_parallel.py."""
    doc: dict = {"method": method, "provenance": provenance(sys.argv), "rows": []}
    try:
        import importlib.metadata as md

        doc["provenance"]["versions"] = {n: md.version(n) for n in (
            "megatron-bridge", "megatron-core", "transformer-engine-cu13")}
    except Exception as e:
        doc["provenance"]["versions_error"] = repr(e)
    doc["runtime"] = runtime_stages(say)
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=False, default=Path("/tmp/fullwidth"))
    parser.add_argument("--models", nargs="+", default=["deepseek_v3", "kimi_k2"])
    parser.add_argument("--only", nargs="*", default=None, help="setting names (or substrings) to run")
    parser.add_argument("--first-microbatch", action="store_true",
                        help="call set_is_first_microbatch() before each forward (the training loop's weight caching)")
    parser.add_argument("--list", action="store_true", help="print the settings and exit")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop starting new settings after this")
    args = parser.parse_args()
    todo = settings(args.models)
    if args.only:
        todo = [s for s in todo if any(o in s["name"] for o in args.only)]
    for s in todo:
        if args.first_microbatch:
            s["first_microbatch"] = True
            s["name"] += "-fmb"
    if args.list:
        for s in todo:
            print(s["name"])
        print(f"{len(todo)} settings")
        return 0
    require_gpu(__file__, 1, BRIDGE_STACK)
    import torch

    def say(line: str) -> None:
        print(line, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_fullwidth_memory.json"
    doc = result_document(__doc__, say)
    t_start = time.perf_counter()
    for i, s in enumerate(todo):
        if time.perf_counter() - t_start > args.budget_s:
            doc["rows"].append({"setting": s, "error": "skipped: time budget"})
            continue
        t0 = time.perf_counter()
        if True:  # one work folder: huggingface_hub reads HF_HUB_CACHE once, at the first setting's import
            try:
                row = measure(s, args.out / "hf_work", say)
                m = row["measured"]
                marks = " ".join(f"{n}={v / MIB:.0f}" for n, v in m["marks"])
                say(f"[{i + 1}/{len(todo)}] {s['name']}: fwd kept {(m['after_forward'] - m['start']) / MIB:.0f} MiB, "
                    f"bwd peak +{(m['backward_peak'] - m['start']) / MIB:.0f} MiB, params "
                    f"{row['param_bytes'] / MIB:.0f}, other persistent {row['persistent_other'] / MIB:.0f}; {marks}; "
                    f"{time.perf_counter() - t0:.1f} s")
            except Exception as e:  # a failed setting is a row, the others still run
                row = {"setting": s, "error": f"{type(e).__name__}: {e}"[:2000],
                       "traceback": traceback.format_exc()[-3000:]}
                say(f"[{i + 1}/{len(todo)}] {s['name']}: FAILED {row['error'][:300]}")
        doc["rows"].append(row)
        gc.collect()
        torch.cuda.empty_cache()
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    ok = sum(1 for r in doc["rows"] if "measured" in r)
    say(f"done: {ok} of {len(todo)} settings measured -> {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
