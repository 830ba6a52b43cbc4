"""HF -> Megatron conversion: atomic publication of checkpoint_dir, the skip rule the Slurm pre-step relies on, the
token staying in the environment. AutoBridge is replaced by a stand-in that writes what save_megatron_model writes."""

from __future__ import annotations

import json
import os
import signal
import sys
import types

import pytest

from cloudai_mbridge.payload import convert as cv
from cloudai_mbridge.payload import hf_config

MARKER = "latest_checkpointed_iteration.txt"


def config(tmp_path, model: str = "kimi_k2", **extra) -> dict:
    return {"model": {"name": model}, "hf_model_id": "moonshotai/Kimi-K2-Base",
            "checkpoint_dir": str(tmp_path / "ckpt" / "kimi_k2"), **extra}


def writes_checkpoint(calls: list):
    def fake(hf_id: str, path: str, trust: bool) -> None:
        calls.append((hf_id, path, trust))
        os.makedirs(f"{path}/iter_0000000")
        with open(f"{path}/iter_0000000/common.pt", "w") as f:
            f.write("weights")
        with open(f"{path}/{MARKER}", "w") as f:
            f.write("0")
    return fake


def leftovers(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "ckpt").glob(".*"))


def test_converts_into_place_atomically(tmp_path):
    calls: list = []
    target = cv.convert(config(tmp_path), import_ckpt=writes_checkpoint(calls))
    assert (target / MARKER).read_text() == "0" and (target / "iter_0000000" / "common.pt").exists()
    (hf_id, path, trust), = calls
    assert hf_id == "moonshotai/Kimi-K2-Base" and trust is True
    assert path != str(target) and ".kimi_k2.partial-" in path  # written beside, renamed at the end
    assert leftovers(tmp_path) == []


def test_skips_a_complete_checkpoint(tmp_path, capsys):
    target = tmp_path / "ckpt" / "kimi_k2"
    target.mkdir(parents=True)
    (target / MARKER).write_text("0")
    calls: list = []
    cv.convert(config(tmp_path), import_ckpt=writes_checkpoint(calls))
    assert calls == [] and "MBRIDGE_CONVERT skip" in capsys.readouterr().out


def test_a_failed_conversion_leaves_nothing_the_skip_check_accepts(tmp_path):
    def dies(hf_id, path, trust):
        os.makedirs(f"{path}/iter_0000000")
        raise RuntimeError("node lost")

    with pytest.raises(RuntimeError, match="node lost"):
        cv.convert(config(tmp_path), import_ckpt=dies)
    assert not (tmp_path / "ckpt" / "kimi_k2").exists() and leftovers(tmp_path) == []


def test_sigterm_cleans_up(tmp_path):
    def cancelled(hf_id, path, trust):
        os.makedirs(f"{path}/iter_0000000")
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        cv.convert(config(tmp_path), import_ckpt=cancelled)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert not (tmp_path / "ckpt" / "kimi_k2").exists() and leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_conversion_without_marker_is_refused(tmp_path):
    def no_marker(hf_id, path, trust):
        os.makedirs(f"{path}/iter_0000000")

    with pytest.raises(cv.ConvertError, match=r"without writing latest_checkpointed_iteration\.txt"):
        cv.convert(config(tmp_path), import_ckpt=no_marker)
    assert not (tmp_path / "ckpt" / "kimi_k2").exists() and leftovers(tmp_path) == []


def test_never_overwrites_foreign_data(tmp_path):
    target = tmp_path / "ckpt" / "kimi_k2"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    with pytest.raises(cv.ConvertError, match="holds no complete checkpoint"):
        cv.convert(config(tmp_path), import_ckpt=writes_checkpoint([]))
    assert (target / "notes.txt").read_text() == "mine"


def test_an_empty_target_folder_is_replaced(tmp_path):
    (tmp_path / "ckpt" / "kimi_k2").mkdir(parents=True)
    assert (cv.convert(config(tmp_path), import_ckpt=writes_checkpoint([])) / MARKER).exists()


def test_stale_partials_are_reported_not_deleted(tmp_path, capsys):
    stale = tmp_path / "ckpt" / ".kimi_k2.partial-99999"
    stale.mkdir(parents=True)
    cv.convert(config(tmp_path), import_ckpt=writes_checkpoint([]))
    assert stale.exists() and f"{stale} is left over" in capsys.readouterr().out


@pytest.mark.parametrize(("model", "extra", "trust"), [
    ("kimi_k2", {}, True), ("deepseek_v3", {}, False), ("deepseek_v3", {"trust_remote_code": True}, True),
])
def test_trust_remote_code(tmp_path, model, extra, trust):
    assert cv.trust_remote_code(config(tmp_path, model, **extra)) is trust


def test_main_uses_autobridge_and_never_prints_the_token(tmp_path, monkeypatch, capsys):
    # megatron.bridge cannot be installed here (it needs Transformer Engine and a GPU): a stand-in with the calls
    # convert.py makes (AutoBridge.import_ckpt's steps); the real one ran on an H100 (benchmarks/gpu_sft.py).
    calls = []

    class Provider:
        gradient_accumulation_fusion = True

        def provide_distributed_model(self, **kwargs):
            calls.append(("model", kwargs))
            return "model"

    class Bridge:
        def to_megatron_provider(self, load_weights):
            calls.append(("provider", load_weights))
            return Provider()

        def save_megatron_model(self, model, path, **kwargs):
            writes_checkpoint([])(model, path, True)

    class AutoBridge:
        @staticmethod
        def from_hf_pretrained(hf_model_id, **kwargs):
            calls.append((hf_model_id, kwargs))
            return Bridge()

    bridge = types.ModuleType("megatron.bridge")
    bridge.AutoBridge = AutoBridge
    monkeypatch.setitem(sys.modules, "megatron.bridge", bridge)
    monkeypatch.setenv("HF_TOKEN", "hf_s3cr3tT0k3n")
    cache = tmp_path / "hf" / "hub"  # the user's Hugging Face cache holds the model: no hub needed
    hf_config.stage_entry(cache, "moonshotai/Kimi-K2-Base", {"config.json": b"{}"})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps(config(tmp_path)))
    assert cv.main(["--config", str(path)]) == 0
    import torch

    assert calls[0] == ("moonshotai/Kimi-K2-Base", {"torch_dtype": torch.bfloat16, "trust_remote_code": True})
    assert calls[1:] == [("provider", True), ("model", {"wrap_with_ddp": False, "use_cpu_initialization": True})]
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    out = capsys.readouterr()
    assert "hf_s3cr3tT0k3n" not in out.out + out.err and "HF_TOKEN set" in out.out
    # APEX is not installed here: the fusion the conversion's model would refuse is switched off, and said
    assert "MBRIDGE_FALLBACK gradient_accumulation_fusion=False" in out.out


def test_hub_id_nobody_has_fails_fast_with_the_way_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps(config(tmp_path)))
    assert cv.main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "hf_model_id = 'moonshotai/Kimi-K2-Base'" in err and "HF_HUB_OFFLINE is set" in err
    assert "huggingface-cli download moonshotai/Kimi-K2-Base" in err
    assert not list(tmp_path.glob("**/.ckpt.partial-*"))


@pytest.mark.parametrize(("change", "message"), [
    ({"hf_token": "x"}, "pass the Hugging Face token as HF_TOKEN"),
    ({"hf_model_id": None}, "needs hf_model_id"),
    ({"checkpoint_dir": "relative/ckpt"}, "must be an absolute path"),
])
def test_bad_configs(tmp_path, capsys, change, message):
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps({**config(tmp_path), **change}))
    assert cv.main(["--config", str(path)]) == cv.EXIT_CONFIG
    assert message in capsys.readouterr().err
