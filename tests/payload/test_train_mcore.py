"""The mcore engine's model config against the real Megatron-Core installed here (0.16.1): every keyword is a real
field and passes TransformerConfig.__post_init__'s checks, for the proxies and each dispatcher."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.launch.training import training_config
from cloudai_mbridge.payload.train import mcore as tm
from cloudai_mbridge.payload.train.config import ConfigError, check_config, missing_echo_fields
from cloudai_mbridge.plan import TrainingPlan
from cloudai_mbridge.plan.training import EchoOptions

pytest.importorskip("megatron.core")

JOB = {"engine": "mcore", "data": "mock", "hf_model_id": None, "checkpoint_dir": None, "seed": 7, "log_interval": 1,
       "output_dir": "/results/run"}


def mcore_cfg(model: str = "kimi_k2_proxy", **plan) -> dict:
    defaults = {"num_nodes": 1, "gpus_per_node": 8, "ep": 8, "gbs": 16}
    p = TrainingPlan(model=get_model(model), gpu=get_gpu(plan.pop("gpu", "h100")), **{**defaults, **plan})
    return check_config(json.loads(json.dumps(training_config(p, **JOB))))


@pytest.mark.parametrize("mla", [False, True])
@pytest.mark.parametrize(("model", "dispatcher"), [
    ("kimi_k2_proxy", "alltoall"), ("kimi_k2_proxy", "deepep"), ("deepseek_v3_proxy", "hybridep"),
])
def test_real_transformer_config(model, dispatcher, mla):
    cfg = mcore_cfg(model, tp=2, ep=4, dispatcher=dispatcher, force_balanced_routing=True, recompute="selective",
                    recompute_modules=("core_attn",))
    config = tm.transformer_config(tm.mcore_transformer_kwargs(cfg, mla=mla))
    facts = get_model(model)
    assert type(config).__name__ == ("MLATransformerConfig" if mla else "TransformerConfig")
    assert config.multi_latent_attention is mla
    assert (config.num_layers, config.hidden_size, config.num_attention_heads) == (
        facts.num_layers, facts.hidden_size, facts.num_attention_heads)
    assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == (
        facts.num_experts, facts.moe_router_topk, facts.moe_ffn_hidden_size)
    assert config.moe_shared_expert_intermediate_size == facts.shared_expert_intermediate_size
    assert config.moe_layer_freq == [0] * facts.first_k_dense + [1] * (facts.num_layers - facts.first_k_dense)
    assert (config.moe_router_num_groups, config.moe_router_group_topk) == (
        facts.router_num_groups, facts.router_group_topk)
    assert config.mtp_num_layers == facts.mtp_num_layers
    assert (config.tensor_model_parallel_size, config.expert_model_parallel_size) == (2, 4)
    assert config.sequence_parallel is True
    assert config.moe_router_force_load_balancing is True
    assert config.moe_grouped_gemm is False  # SequentialMLP: the local spec without TE
    assert config.recompute_granularity == "selective" and config.recompute_modules == ["core_attn"]
    if dispatcher == "alltoall":
        assert config.moe_token_dispatcher_type == "alltoall" and config.moe_shared_expert_overlap is True
    else:
        assert config.moe_token_dispatcher_type == "flex" and config.moe_flex_dispatcher_backend == dispatcher
        assert config.moe_shared_expert_overlap is False
    if mla:
        assert (config.q_lora_rank, config.kv_lora_rank, config.qk_head_dim, config.qk_pos_emb_head_dim,
                config.v_head_dim) == (facts.q_lora_rank, facts.kv_lora_rank, facts.qk_head_dim,
                                       facts.qk_pos_emb_head_dim, facts.v_head_dim)
    else:
        assert config.kv_channels == facts.v_head_dim and config.num_query_groups == facts.num_attention_heads


def test_full_recompute_config():
    config = tm.transformer_config(tm.mcore_transformer_kwargs(mcore_cfg(recompute="full"), mla=False))
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == (
        "full", "uniform", 1)


def test_megatron_rejects_what_the_local_spec_cannot_do():
    """moe_act recompute needs grouped GEMM (TE): Megatron-Core's own check fires, with its own message."""
    cfg = mcore_cfg(recompute="selective", recompute_modules=("moe_act",))
    with pytest.raises(ValueError, match="moe_act in recompute_modules is only supported with moe_grouped_gemm"):
        tm.transformer_config(tm.mcore_transformer_kwargs(cfg, mla=False))


def test_mla_detection_matches_megatron_core():
    """MultiLatentAttention hands its core attention k_channels/v_channels; the local DotProductAttention of this
    megatron-core does not take them, so the local spec cannot build MLA and the engine must fall back."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import multi_latent_attention

    spec = get_gpt_layer_local_spec(num_experts=8, moe_grouped_gemm=False, multi_latent_attention=True)
    core = spec.submodules.self_attention.submodules.core_attention
    takes = set(inspect.signature(core.__init__).parameters)
    assert "k_channels=" in inspect.getsource(multi_latent_attention.MultiLatentAttention.__init__)
    assert tm.mla_supported() is ({"k_channels", "v_channels"} <= takes)
    assert tm.mla_supported() is False  # megatron-core 0.16.1


def test_echo_needs_the_echo_fork():
    cfg = mcore_cfg(gpu="b300", dispatcher="hybridep", precision="mxfp8", echo=EchoOptions(num_echo_experts=8))
    fields = tm.transformer_config_fields()
    assert "moe_router_force_load_balancing" in fields and "moe_enable_echo" not in fields
    with pytest.raises(ConfigError, match=r"no field\(s\) moe_echo_expert_dispatcher_type, .*moe_enable_echo"):
        missing_echo_fields(cfg, fields, "megatron-core 0.16.1")


def test_missing_te_names_are_bound_like_megatron_core_017(monkeypatch):
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):  # megatron-core 0.16 without Transformer Engine
        for name in tm._TE_ONLY_MOE_NAMES:
            monkeypatch.setattr(moe_utils, name, None, raising=False)
            monkeypatch.delattr(moe_utils, name)
        assert "te_general_gemm" in tm.bind_missing_te_names()
    assert moe_utils.te_general_gemm is None or callable(moe_utils.te_general_gemm)
    assert tm.bind_missing_te_names() == []


def test_every_kwarg_is_a_megatron_field():
    names = tm.transformer_config_fields()
    for mla in (False, True):
        kwargs = tm.mcore_transformer_kwargs(mcore_cfg("deepseek_v3_proxy"), mla=mla)
        assert set(kwargs) <= names, set(kwargs) - names
        json.dumps(kwargs)  # plain values only
    assert {f.name for f in dataclasses.fields(tm.transformer_config(kwargs))} == names
