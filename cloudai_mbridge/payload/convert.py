"""HF -> Megatron checkpoint conversion: `python3 -m mbridge_payload.convert --config <run>/mbridge_config.json`.

Runs once, on one task, before an SFT job (workloads/training/slurm.py skips the step when
<checkpoint_dir>/latest_checkpointed_iteration.txt exists). Megatron-Bridge's AutoBridge.import_ckpt reads
hf_model_id (trust_remote_code for Kimi-K2, whose HF config is custom code) and writes a Megatron checkpoint.

It writes into a sibling folder `.<name>.partial-<pid>` and renames that onto checkpoint_dir only once the marker
file is there, so a killed conversion never leaves a checkpoint_dir that the skip check would accept. A partial
folder is removed on any error or SIGTERM (Slurm's cancel/timeout); after a SIGKILL it stays, named as such, and
the next run lists it. The Hugging Face token is read by huggingface_hub from HF_TOKEN in the environment only;
this script never reads, prints or stores it (it says only whether one is set).

Config keys read: model.name, hf_model_id, checkpoint_dir, and optionally trust_remote_code.
Exit codes: 0 done or already there, 2 configuration error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from . import hf_config
from .train.config import trust_remote_code

MARKER = "latest_checkpointed_iteration.txt"
EXIT_CONFIG = 2
# Secrets belong in the environment, never in a config that is copied into the results folder.
SECRET_KEYS = ("hf_token", "token", "huggingface_token", "HF_TOKEN")


class ConvertError(ValueError):
    """A configuration or filesystem problem; the message names the path or key and the fix."""


def read_config(path: str | Path) -> dict[str, Any]:
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConvertError(f"cannot read the config {path}: {e}") from None
    secrets = [k for k in SECRET_KEYS if k in cfg]
    if secrets:
        raise ConvertError(f"the config carries {', '.join(secrets)}: pass the Hugging Face token as HF_TOKEN in the "
                           "job's environment instead (the config is copied into the results)")
    for key in ("model", "hf_model_id", "checkpoint_dir"):
        if not cfg.get(key):
            raise ConvertError(f"conversion needs {key} in the config (set cmd_args.{key} or the model's hf_id)")
    if not Path(cfg["checkpoint_dir"]).is_absolute():
        raise ConvertError(f"checkpoint_dir = {cfg['checkpoint_dir']!r} must be an absolute path")
    return cfg


def is_complete(checkpoint_dir: Path) -> bool:
    return (checkpoint_dir / MARKER).is_file()


def stale_partials(checkpoint_dir: Path) -> list[Path]:
    return sorted(checkpoint_dir.parent.glob(f".{checkpoint_dir.name}.partial-*"))


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def convert(cfg: dict[str, Any], import_ckpt=None) -> Path:
    """Convert hf_model_id into checkpoint_dir unless it is already there; returns checkpoint_dir."""
    target = Path(cfg["checkpoint_dir"])
    if is_complete(target):
        print(f"MBRIDGE_CONVERT skip: {target / MARKER} exists", flush=True)
        return target
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConvertError(f"{target} exists but holds no complete checkpoint ({MARKER} missing); move it away or "
                           "point checkpoint_dir elsewhere (it is never deleted for you)")
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in stale_partials(target):
        print(f"MBRIDGE_CONVERT note: {old} is left over from an interrupted conversion; remove it to free space",
              flush=True)
    if import_ckpt is None:
        # Before Bridge imports huggingface_hub: a hub id no cache holds while the hub is off or silent fails now,
        # with the way out, instead of retrying; a local folder (or a cached id) runs offline.
        try:
            hf_config.settle_hub({"hf_model_id": cfg["hf_model_id"], "convert": True})
        except hf_config.HubError as e:
            raise ConvertError(str(e)) from None
        import torch
        from megatron.bridge import AutoBridge

        from .train.bridge import apply_fusion_fallbacks

        def import_ckpt(hf_id: str, path: str, trust: bool) -> None:
            """AutoBridge.import_ckpt's steps, with the fused kernels this container lacks switched off on the
            provider first (the conversion builds the model, and e.g. ColumnParallelLinear refuses
            gradient_accumulation_fusion without APEX)."""
            bridge = AutoBridge.from_hf_pretrained(hf_id, torch_dtype=torch.bfloat16, trust_remote_code=trust)
            provider = bridge.to_megatron_provider(load_weights=True)
            for name, reason in apply_fusion_fallbacks(provider):
                print(f"MBRIDGE_FALLBACK {name}=False ({reason})", flush=True)
            if hasattr(provider, "finalize"):
                provider.finalize()
            model = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
            model_bridge = getattr(bridge, "_model_bridge", None)  # what import_ckpt asks for tokenizer kwargs
            tokenizer_kwargs = model_bridge.get_hf_tokenizer_kwargs() if hasattr(
                model_bridge, "get_hf_tokenizer_kwargs") else {}
            bridge.save_megatron_model(model, path, hf_tokenizer_path=hf_id, hf_tokenizer_kwargs=tokenizer_kwargs,
                                       low_memory_save=True)

    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    trust = trust_remote_code(cfg)
    print(f"MBRIDGE_CONVERT start: {cfg['hf_model_id']} -> {target} (via {partial.name}, trust_remote_code={trust}, "
          f"HF_TOKEN {'set' if os.environ.get('HF_TOKEN') else 'not set'})", flush=True)
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        partial.mkdir()
        import_ckpt(cfg["hf_model_id"], str(partial), trust)
        if not is_complete(partial):
            raise ConvertError(f"the conversion finished without writing {MARKER}; the checkpoint is not usable")
        if is_complete(target):
            print(f"MBRIDGE_CONVERT done elsewhere meanwhile: keeping {target}", flush=True)
            shutil.rmtree(partial)
            return target
        if target.is_dir():
            target.rmdir()  # empty, checked above
        os.replace(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"MBRIDGE_CONVERT done: {target}", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mbridge_payload.convert", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="mbridge_config.json written by the generator")
    args = parser.parse_args(argv)
    try:
        convert(read_config(args.config))
    except ConvertError as e:
        print(f"MBRIDGE_CONVERT_ERROR {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    return 0


if __name__ == "__main__":
    sys.exit(main())
