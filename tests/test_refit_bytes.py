"""The refit byte plan (plan/refit_bytes.py): conservation, identical layouts, a hand-computed case and the bytes
megatron-core 0.17.1 reported on 2x H200."""

import json
from pathlib import Path

import pytest

from cloudai_mbridge.payload.refit.config import derive_layouts, from_dict, padded_vocab_size
from cloudai_mbridge.plan.refit_bytes import (
    Bandwidth,
    ModelTensors,
    Tensor,
    build_plan,
    payload_tensors,
    predict_seconds,
    side,
)

FIX = Path(__file__).parent / "fixtures" / "logs" / "gpu"

TINY = {"name": "tiny", "num_layers": 2, "hidden_size": 128, "ffn_hidden_size": 256, "moe_ffn_hidden_size": 64,
        "num_attention_heads": 8, "num_query_groups": None, "num_experts": 8, "moe_router_topk": 2,
        "moe_shared_expert_intermediate_size": 64, "vocab_size": 1024, "seq_length": 128}


def _per_tensor_expected(model: ModelTensors, dst) -> dict[str, int]:
    """Bytes each tensor must arrive with: one full copy per destination data-parallel replica (dense) or per
    expert-data-parallel replica (experts, every expert of the layer); a replicated tensor (norm, router) is whole on
    every rank of a replica, so tp copies of it per replica."""
    out = {t.name: model.nbytes(t) * dst.dp * (dst.tp if t.kind == "rep" else 1) for t in model.dense}
    for ts in model.expert.values():
        for t in ts:
            out[t.name] = model.nbytes(t) * model.num_experts * dst.edp
    return out


@pytest.mark.parametrize("src_args,dst_args", [
    ((2, 1, 2, 8), (4, 1, 1, 8)), ((1, 2, 4, 8), (2, 1, 8, 8, 1)), ((4, 2, 1, 8), (1, 1, 2, 8, 1))])
@pytest.mark.parametrize("policy", ["megatron", "local-first"])
def test_every_byte_reaches_every_replica_once(src_args, dst_args, policy):
    model = payload_tensors(TINY, 1024)
    src, dst = side(*src_args[:4], name="src"), side(*dst_args[:4], etp=(dst_args[4:] or [None])[0], name="dst")
    plan = build_plan(model, src, dst, gpus_per_node=4, policy=policy)
    assert plan.delivered == _per_tensor_expected(model, dst)
    assert sum(r.recv for r in plan.ranks.values()) == sum(_per_tensor_expected(model, dst).values())
    assert plan.total("recv_remote") == plan.total("send_remote")


def test_identical_layouts_move_no_remote_byte():
    model = payload_tensors(TINY, 1024)
    same = side(2, 2, 2, 8, name="x")
    assert build_plan(model, same, same, 4, "local-first").total("recv_remote") == 0
    dp1 = side(2, 2, 1, 4, name="x")  # dp=1: megatron-core's own choice is local too
    assert build_plan(model, dp1, dp1, 4, "megatron").total("recv_remote") == 0
    # megatron-core serves TP-sharded weights from source replica 0: with dp=2 the second replica reads remotely
    assert build_plan(model, same, same, 4, "megatron").total("recv_remote") > 0


def test_hand_computed_small_case():
    """One 8x4 bf16 weight cut on dim 0: tp2 -> tp1, two ranks, one node. Rank 0 (dst, dp 0) holds the whole 64 B:
    32 B local from itself, 32 B from rank 1; rank 1 (dst dp 1) the same with the roles swapped. Each GPU sends and
    receives 32 B remotely (32e-9 s at 1 GB/s) and copies 32 B locally (32e-9 s at 1 GB/s)."""
    model = ModelTensors("hand", 1, 1, 2, (Tensor("w", 32, "tp", 0),), {})
    plan = build_plan(model, side(2, 1, 1, 2, name="src"), side(1, 1, 1, 2, name="dst"), 8)
    assert [(r.recv_local, r.recv_remote, r.send_remote, r.ops) for r in plan.ranks.values()] == [
        (32, 32, 32, 2), (32, 32, 32, 2)]
    assert predict_seconds(plan, Bandwidth("x", 1.0, 1.0, 1.0)) == pytest.approx(64 / 1e9)


def test_matches_the_bytes_measured_on_two_h200():
    cfg_d = json.loads((FIX / "refit_tp2-ep2_2l" / "mbridge_config.json").read_text())
    # written before an unset destination etp meant the source's (resolve_sides): an absent one then meant its own tp
    cfg_d["dst"].setdefault("etp", cfg_d["dst"]["tp"])
    cfg = from_dict(cfg_d)
    src, dst = derive_layouts(cfg, 2)
    plan = build_plan(payload_tensors(cfg_d["model"], padded_vocab_size(cfg)), src, dst)
    # gpu_refit_nccl.json: bytes_remote 39159070720, bytes_local 39181377536, 4670 ops (both ranks)
    assert (plan.total("recv_remote"), plan.total("recv_local"), plan.total("ops")) == (
        39159070720, 39181377536, 4670)


# --- issue 43 item 7: the Qwen3 refit models of NeMo-RL's published table (catalog/refit_models.py) ---
@pytest.mark.parametrize(("name", "card_billions"), [("qwen3_4b", 4.0), ("qwen3_30b_a3b", 30.5),
                                                     ("qwen3_235b_a22b", 235.0)])
def test_qwen3_refit_models_have_their_model_cards_parameter_count(name, card_billions):
    """The config.json values written into the catalog give the parameter count each model card states (4.0B, 30.5B,
    235B): a wrong head count, expert size or tie flag moves it by more than the card's rounding."""
    from cloudai_mbridge.catalog.refit_models import REFIT_MODELS
    from cloudai_mbridge.plan.refit_bytes import gqa_tensors

    model = gqa_tensors(REFIT_MODELS[name])
    assert model.params / 1e9 == pytest.approx(card_billions, abs=0.06 if card_billions < 100 else 0.5)
    fp8 = gqa_tensors(REFIT_MODELS[name], 1, 2)  # linear weights in FP8, embedding / output / norms bf16
    assert model.bytes / 2 < fp8.bytes < model.bytes * 0.6


def test_a_tied_output_layer_is_not_sent_and_every_byte_still_arrives_once():
    from cloudai_mbridge.catalog.refit_models import QWEN3_4B, QWEN3_30B_A3B
    from cloudai_mbridge.plan.refit_bytes import build_plan, gqa_tensors, side

    names = {t.name for t in gqa_tensors(QWEN3_4B).dense}
    assert "embedding" in names and "output_layer" not in names  # tie_word_embeddings = true
    assert "output_layer" in {t.name for t in gqa_tensors(QWEN3_30B_A3B).dense}
    model = gqa_tensors(QWEN3_30B_A3B)
    plan = build_plan(model, side(1, 2, 8, 16, etp=1), side(4, 1, 1, 16, etp=4, first_rank=16), policy="local-first")
    assert plan.delivered == _per_tensor_expected(model, plan.dst)  # every vLLM replica gets the whole model
    assert plan.total("recv_local") == 0  # disaggregated: nothing is already on the generation GPUs
