"""SFT through the real Megatron-Bridge engine, end to end and without the hub, on one GPU.

Steps (each timed; the run folder keeps every input and log):
  1. data       <out>/data/training.jsonl: --examples synthetic question/answer pairs ({"input", "output"}, the
                format Bridge's GPTSFTDataset reads), deterministic (seed 0).
  2. tokenizer  a byte-level BPE (vocabulary 4096) trained on that text with the `tokenizers` library, saved with
                transformers' PreTrainedTokenizerFast into <out>/hf_model.
  3. model      a DeepSeek-V3-architecture model (the catalog's deepseek_v3_proxy as payload/hf_config.py writes its
                config.json, without MTP: transformers' DeepseekV3ForCausalLM has no MTP weights) with random weights
                (torch seed 0), bf16, saved with save_pretrained into <out>/hf_model.
  4. convert    the payload's convert step (python3 -m cloudai_mbridge.payload.convert): Bridge's
                AutoBridge.import_ckpt, HF -> Megatron checkpoint in <out>/ckpt.
  5. finetune   the training payload, engine "bridge", task "sft": the DeepSeek-V3 recipe with the model's own config
                (hf_config_dir), Bridge's finetune() from that checkpoint on the JSONL folder, --iters iterations.
Then the run is read back with cloudai_mbridge.metrics.parse_training_run (Bridge's own iteration lines).

Run on a GPU host with the bridge stack (benchmarks/gpu_setup.sh): python3 benchmarks/gpu_sft.py --out /tmp/sft
Prints RESULT sft_status, sft_iterations, sft_loss_first / sft_loss_last (lm loss, first and last logged iteration),
sft_loss_drop_pct and sft_iteration_ms (median of the steady iterations) lines; writes <out>/gpu_sft.json.
A host without a CUDA GPU or without the bridge stack gets one line and exit status 3, before anything is written;
2 for a usage error (e.g. a non-empty --out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from provenance import provenance, require_gpu  # benchmarks/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudai_mbridge.catalog import get_gpu, get_model  # noqa: E402
from cloudai_mbridge.launch.training import training_config  # noqa: E402
from cloudai_mbridge.payload.hf_config import architecture_config  # noqa: E402
from cloudai_mbridge.plan import TrainingPlan  # noqa: E402

MODEL = "deepseek_v3_proxy"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")


def make_data(folder: Path, n: int) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = rng.choice(("add", "word", "reverse"))
        if kind == "add":
            rows.append({"input": f"Question: what is {a} plus {b}?", "output": f"Answer: {a + b}."})
        elif kind == "word":
            w = rng.choice(WORDS)
            rows.append({"input": f"Question: spell the code word for letter {w[0].upper()}.",
                         "output": f"Answer: {w}."})
        else:
            ws = rng.sample(WORDS, 3)
            rows.append({"input": f"Question: reverse {' '.join(ws)}.", "output": f"Answer: {' '.join(ws[::-1])}."})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def make_tokenizer(rows: list[dict], model_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<s>", "</s>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((f"{r['input']} {r['output']}" for r in rows), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.save_pretrained(model_dir)
    return fast


def make_model(model_dir: Path, tokenizer) -> dict:
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = architecture_config(asdict(get_model(MODEL)))
    cfg["num_nextn_predict_layers"] = 0
    cfg["bos_token_id"], cfg["eos_token_id"] = tokenizer.bos_token_id, tokenizer.eos_token_id
    cfg["pad_token_id"] = tokenizer.pad_token_id
    config = DeepseekV3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    config.architectures = ["DeepseekV3ForCausalLM"]
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)
    return {"parameters": sum(p.numel() for p in model.parameters()), "config": cfg}


def plan(iters: int, seq: int) -> TrainingPlan:
    return TrainingPlan(
        model=get_model(MODEL), gpu=get_gpu("h200"), num_nodes=1, gpus_per_node=1, task="sft", tp=1, pp=1, cp=1,
        ep=1, etp=1, mbs=1, gbs=8, seq_length=seq, train_iters=iters, dispatcher="alltoall", recompute="none",
        precision="bf16", mtp_num_layers=0, sequence_parallel=False, optimizer="adam",
        transformer_impl="transformer_engine",
    )


def run(cmd: list[str], log: Path, timeout: int) -> int:
    with log.open("w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--examples", type=int, default=400)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--timeout-s", type=int, default=300, help="per step (convert, finetune)")
    args = p.parse_args(argv)
    require_gpu(__file__, 1, ("megatron.bridge", "megatron.core", "transformer_engine", "transformers", "tokenizers"))
    out = args.out
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty; give a new folder (results are never overwritten)", file=sys.stderr)
        return 2
    info = provenance(["python3", f"benchmarks/{Path(__file__).name}", *argv])
    print(f"device: {info.get('gpus')} torch {info.get('torch')}; method: {__doc__.splitlines()[0]}", flush=True)
    result: dict = {"experiment": "gpu_sft", "provenance": info, "steps": {}}
    model_dir, ckpt, run_dir = out / "hf_model", out / "ckpt", out / "run"
    t = time.perf_counter()
    rows = make_data(out / "data", args.examples)
    tokenizer = make_tokenizer(rows, model_dir)
    built = make_model(model_dir, tokenizer)
    result["steps"]["build_s"] = time.perf_counter() - t
    result["model"] = {"name": MODEL, "parameters": built["parameters"], "vocab": len(tokenizer)}
    print(f"[build] {args.examples} examples, tokenizer {len(tokenizer)} tokens, "
          f"model {built['parameters'] / 1e6:.0f} M parameters in {result['steps']['build_s']:.1f} s", flush=True)

    pl = plan(args.iters, args.seq)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    cfg = training_config(pl, engine="bridge", data=str(out / "data"), checkpoint_dir=str(ckpt),
                          hf_model_id=str(model_dir), hf_config_dir=str(model_dir), seed=1234, log_interval=1,
                          output_dir=str(run_dir))
    (run_dir / "mbridge_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    t = time.perf_counter()
    convert = [sys.executable, "-m", "cloudai_mbridge.payload.convert", "--config",
               str(run_dir / "mbridge_config.json")]
    rc = run(convert, run_dir / "logs" / "convert.log", args.timeout_s)
    result["steps"]["convert_s"], result["steps"]["convert_rc"] = time.perf_counter() - t, rc
    print(f"[convert] rc={rc} in {result['steps']['convert_s']:.1f} s", flush=True)
    if rc != 0:
        print((run_dir / "logs" / "convert.log").read_text()[-3000:])
        print("RESULT sft_status=convert_failed")
        (out / "gpu_sft.json").write_text(json.dumps(result, indent=1, sort_keys=True))
        return 1

    from cloudai_mbridge.metrics import parse_training_run
    from cloudai_mbridge.payload.refit.local import launch

    t = time.perf_counter()
    launched = launch(cfg, 1, timeout=args.timeout_s, module="cloudai_mbridge.payload.train", cwd=ROOT,
                      env={"PYTHONUNBUFFERED": "1"})
    result["steps"]["finetune_s"] = time.perf_counter() - t
    (run_dir / "logs" / "rank-0.log").write_text(launched.stdout[0] + launched.stderr[0])
    m = parse_training_run(run_dir)
    curve = m.loss_curve
    result.update(status=m.status, problems=list(m.problems), returncodes=launched.returncodes,
                  iterations_done=max((r.iteration for r in m.iterations), default=0), loss_curve=curve,
                  iteration_time_ms=asdict(m.iteration_time_ms), tflops_per_gpu=asdict(m.tflops_per_gpu))
    print(f"[finetune] rc={launched.returncodes} status={m.status} in {result['steps']['finetune_s']:.1f} s; "
          f"problems: {list(m.problems)}", flush=True)
    (out / "gpu_sft.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"RESULT sft_status={m.status}")
    print(f"RESULT sft_iterations={result['iterations_done']} iterations")
    if not curve:
        print(launched.describe()[-3000:])
        return 1
    first, last = min(curve), max(curve)
    print(f"RESULT sft_loss_first={curve[first]:.4f} (iteration {first})")
    print(f"RESULT sft_loss_last={curve[last]:.4f} (iteration {last})")
    print(f"RESULT sft_loss_drop_pct={100 * (curve[first] - curve[last]) / curve[first]:.1f} %")
    if m.iteration_time_ms.median is not None:
        s = m.iteration_time_ms
        print(f"RESULT sft_iteration_ms={s.median:.1f} ms (median of {s.n} steady, p10 {s.p10:.1f}, p90 {s.p90:.1f})")
    return 0 if m.ok and curve[last] < curve[first] else 1


if __name__ == "__main__":
    sys.exit(main())
