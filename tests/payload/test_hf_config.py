"""The bridge engine's Hugging Face side without the hub (payload/hf_config.py) and its fused-kernel fallbacks
(payload/train/config.py fusion_fallbacks), checked against facts recorded from the real Megatron-Bridge 0.4.2 on an
H100 (tests/fixtures/bridge_0.4.2_provider_fields.json: MLAModelProvider's fields and the bridge's CONFIG_MAPPING)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from cloudai_mbridge.catalog import get_model
from cloudai_mbridge.payload import hf_config
from cloudai_mbridge.payload.train.config import FUSION_NEEDS, catalog_shape, fusion_fallbacks

FIELDS = json.loads((Path(__file__).parent.parent / "fixtures" / "bridge_0.4.2_provider_fields.json").read_text())
MODELS = ("deepseek_v3_proxy", "kimi_k2_proxy", "deepseek_v3", "kimi_k2")


@pytest.mark.parametrize("name", MODELS)
def test_every_architecture_field_bridge_maps_is_the_catalogs(name):
    """What Bridge's CONFIG_MAPPING reads from config.json lands on a provider field that exists, with the catalog's
    value; the field that broke the first proxy run (num_query_groups = 128 from the full model) is the proxy's."""
    model = asdict(get_model(name))
    config = hf_config.architecture_config(model)
    shape = catalog_shape(model)
    provider_fields = set(FIELDS["mla_provider_fields"])
    mapped = {megatron: config[hf] for hf, megatron in FIELDS["config_mapping"] if hf in config}
    assert set(mapped) <= provider_fields
    for field, value in mapped.items():
        if field in shape and shape[field] is not None:
            assert value == shape[field], field
    assert mapped["num_query_groups"] == model["num_attention_heads"]
    assert mapped["mtp_num_layers"] == (model["mtp_num_layers"] or 0)
    # what DeepSeekV3Bridge.provider_bridge reads beyond the mapping
    assert config["first_k_dense_replace"] == model["first_k_dense"]
    assert config["moe_intermediate_size"] * config["n_shared_experts"] == model["shared_expert_intermediate_size"]


def test_prepare_writes_only_under_the_output_folder_and_goes_offline(tmp_path):
    user = tmp_path / "home" / "hub"
    hf_config.stage_entry(user, "someone/tokenizer", {"config.json": b"{}"})
    env = {"HF_HUB_CACHE": str(user)}
    cfg = {"model": asdict(get_model("deepseek_v3_proxy")), "task": "pretrain", "data": "mock", "hf_model_id": None}
    out = tmp_path / "run"
    plan = hf_config.prepare(cfg, out, env=env, probe=lambda env: pytest.fail("no hub needed, no probe"))
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == str(out / "hf_cache" / "hub")
    written = json.loads((plan.model_dir / "config.json").read_text())
    assert written["num_key_value_heads"] == 32 and written["mbridge_source"].endswith("deepseek_v3_proxy")
    for repo in hf_config.RECIPE_HUB_IDS:  # the recipes' literal ids resolve from the private cache
        assert hf_config.cached(plan.cache, repo)
    assert hf_config.cached(plan.cache, "someone/tokenizer") and plan.linked == 1  # the user's cache stays visible
    outside = [p for p in tmp_path.rglob("*") if not (p.is_relative_to(out) or p.is_relative_to(user.parent))]
    assert outside == []
    assert "hub=offline" in plan.line()


def test_a_hub_id_nobody_has_is_refused_at_once_with_the_way_out(tmp_path):
    cfg = {"model": asdict(get_model("kimi_k2")), "task": "sft", "data": "/data/sft", "hf_model_id": "org/model"}
    start = time.perf_counter()
    with pytest.raises(hf_config.HubError) as e:
        hf_config.prepare(cfg, tmp_path, env={"HF_HUB_CACHE": str(tmp_path / "none")}, probe=lambda env: False)
    assert time.perf_counter() - start < 5
    msg = str(e.value)
    assert "hf_model_id = 'org/model'" in msg and "does not answer" in msg
    assert "huggingface-cli download org/model" in msg
    with pytest.raises(hf_config.HubError, match="HF_HUB_OFFLINE is set"):
        hf_config.check_hub(["org/model"], env={"HF_HUB_OFFLINE": "1"}, probe=lambda env: True)


def test_local_or_cached_models_need_no_hub(tmp_path):
    user = tmp_path / "hub"
    hf_config.stage_entry(user, "org/cached", {"config.json": b"{}"})
    env = {"HF_HUB_CACHE": str(user)}
    base = {"task": "sft", "data": "/data/sft"}
    assert hf_config.needs_hub({**base, "hf_model_id": "/models/local"}, env) == []
    assert hf_config.needs_hub({**base, "hf_model_id": "org/cached"}, env) == []
    assert hf_config.needs_hub({**base, "hf_model_id": "org/other"}, env) == ["org/other"]
    assert hf_config.needs_hub({"task": "pretrain", "data": "mock", "hf_model_id": "org/other"}, env) == []


def test_hf_config_dir_without_config_json_is_a_clear_error(tmp_path):
    cfg = {"model": asdict(get_model("kimi_k2")), "hf_config_dir": str(tmp_path)}
    with pytest.raises(hf_config.HubError, match=r"holds no config\.json"):
        hf_config.prepare(cfg, tmp_path / "out", env={})


def test_fused_kernels_are_switched_off_only_where_their_module_is_missing():
    enabled = {name: True for name, _, _ in FUSION_NEEDS}
    nothing = fusion_fallbacks(enabled, lambda m: False)
    assert [n for n, _ in nothing] == [n for n, _, _ in FUSION_NEEDS]
    apex_missing = fusion_fallbacks(enabled, lambda m: not m.startswith(("fused_weight", "apex")))
    assert [n for n, _ in apex_missing] == ["gradient_accumulation_fusion", "persist_layer_norm"]
    assert "APEX" in apex_missing[0][1]
    off = {**enabled, "gradient_accumulation_fusion": False}
    assert fusion_fallbacks(off, lambda m: m != "fused_weight_gradient_mlp_cuda") == []


# --- issue 26: what hf_config_dir may hand over -------------------------------------------------------------------
MODEL_CONFIG = b'{"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]}'


def test_config_dir_copies_the_folders_own_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(MODEL_CONFIG)
    (tmp_path / "modeling_x.py").write_text("# custom code\n")
    (tmp_path / "inner.json").symlink_to("config.json")  # a link that stays inside the folder is fine
    (tmp_path / "README.md").write_text("not copied")
    files = hf_config.config_dir_files(tmp_path)
    assert files == {"config.json": MODEL_CONFIG, "inner.json": MODEL_CONFIG, "modeling_x.py": b"# custom code\n"}


@pytest.mark.parametrize(("make", "said"), [
    (lambda d: (d / "config.json").symlink_to("/etc/passwd"), "config.json is a link to /etc/passwd, outside"),
    (lambda d: ((d / "config.json").write_bytes(MODEL_CONFIG), (d / "x.py").symlink_to("/etc/hostname")),
     "x.py is a link to /etc/hostname, outside"),
    (lambda d: os.mkfifo(d / "config.json"), "config.json is not a regular file"),
    (lambda d: (d / "config.json").mkdir(), "config.json is not a regular file"),
    (lambda d: (d / "config.json").write_bytes(b'{"root": "x"}'), "no model_type or architectures"),
    (lambda d: (d / "config.json").write_bytes(b"[1]"), "is not a JSON object"),
    (lambda d: (d / "config.json").write_bytes(b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    (lambda d: (d / "config.json").write_bytes(b"\xff"), "is not JSON"),
    (lambda d: ((d / "config.json").write_bytes(MODEL_CONFIG),
                (d / "tokenizer.json").touch(), os.truncate(d / "tokenizer.json", hf_config.MAX_CONFIG_FILE_BYTES + 1)),
     "tokenizer.json is larger than 32 MiB"),
    (lambda d: (d / "readme.txt").write_text("x"), "holds no config.json"),
])
def test_config_dir_refuses_what_is_not_the_folders_model_config(tmp_path: Path, make, said: str) -> None:
    folder = tmp_path / "hfc"
    folder.mkdir()
    make(folder)
    with pytest.raises(hf_config.HubError, match="hf_config_dir") as exc:
        hf_config.config_dir_files(folder)
    assert said in str(exc.value) and "Fix:" in str(exc.value)


def test_prepare_copies_nothing_from_a_refused_folder(tmp_path: Path) -> None:
    folder = tmp_path / "hfc"
    folder.mkdir()
    (folder / "config.json").symlink_to("/etc/passwd")
    cfg = {"hf_config_dir": str(folder), "task": "pretrain", "hf_model_id": None}
    with pytest.raises(hf_config.HubError, match="outside"):
        hf_config.prepare(cfg, tmp_path / "out", env={}, probe=lambda **_: False)
    assert not (tmp_path / "out").exists()
