"""The memory estimate: each term moves the way its derivation says, and the totals match published sizes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from rules_support import seed_plan, small_plan, with_

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.plan import TrainingPlan
from cloudai_mbridge.plan.layout import PipelineLayout
from cloudai_mbridge.plan.memory import (
    GIB,
    MemoryEstimate,
    _activations,
    _attention_params,
    _estimate_memory,
    _rank_params,
    _stage_counts,
    estimate_memory,
    estimate_ranks,
    in_flight_chunks,
)
from cloudai_mbridge.rules import TRAINING_RULES


def total_params(model: str, mtp: int | None = None) -> int:
    """All parameters of the model on one rank (tp = pp = ep = 1), with the MTP layers the plan gives it."""
    plan = seed_plan(model=model, tp=1, pp=1, vp=None, ep=1, mtp_num_layers=mtp)
    m = plan.model
    stage = ["embedding"] + ["decoder"] * m.num_layers + ["mtp"] * (plan.effective_mtp_layers or 0) + ["loss"]
    counts = _stage_counts(PipelineLayout.from_stages([stage], 1), m.first_k_dense)[0]
    p = _rank_params(plan, counts)
    return p.dense + p.expert + p.embedding


def test_parameter_counts_match_published_sizes() -> None:
    # Kimi-K2: "1T total parameters"; DeepSeek-V3: 671B main model, 685B with the MTP module (which also carries
    # its own copy of embedding and head in the HF checkpoint: ~1.9B we do not count on one stage).
    assert 1.00e12 < total_params("kimi_k2") < 1.04e12
    assert total_params("deepseek_v3", mtp=0) == pytest.approx(671e9, rel=0.005)
    assert total_params("deepseek_v3") == pytest.approx(685e9 - 1.85e9, rel=0.005)


def test_mla_attention_parameters_from_the_mla_dims() -> None:
    plan = seed_plan(tp=8)
    h, a = 7168, 64
    replicated = h * 1536 + 1536 + h * (512 + 64) + 512 + h
    split = 1536 * a * (128 + 64) + 512 * a * (128 + 128) + a * 128 * h
    assert _attention_params(plan) == replicated + split // 8


def test_embedding_and_output_sit_on_first_and_last_stage() -> None:
    plan = seed_plan()
    counts = _stage_counts(plan.pipeline.layout, plan.model.first_k_dense)
    vocab = 163840 * 7168 // 8
    assert _rank_params(plan, counts[0]).embedding == vocab
    assert _rank_params(plan, counts[7]).embedding == vocab
    assert _rank_params(plan, counts[3]).embedding == 0
    # 12 routed experts per rank (384 / ep 32) on each of rank 3's 8 MoE layers.
    assert _rank_params(plan, counts[3]).expert == 8 * 12 * 3 * 7168 * 2048


def test_in_flight_micro_batches() -> None:
    assert in_flight_chunks(8, 0, 1, 64, False) == (8,)  # 1F1B: pp micro-batches on stage 0
    assert in_flight_chunks(8, 7, 1, 64, False) == (1,)
    assert in_flight_chunks(8, 0, 2, 16, False) == (15, 8)  # interleaved: 2(pp-1) + (vp-1)pp + 1 chunks
    assert in_flight_chunks(8, 0, 2, 16, True) == (16, 8)  # a2a overlap runs one more forward first
    assert in_flight_chunks(8, 7, 2, 16, False) == (8, 1)
    assert in_flight_chunks(8, 0, 2, 4, False) == (4, 4)  # fewer micro-batches than the warm-up
    assert in_flight_chunks(1, 0, 1, 64, False) == (1,)


def test_terms_move_as_derived() -> None:
    base = estimate_memory(seed_plan(mbs=4))
    assert estimate_memory(seed_plan(mbs=1)).activations < base.activations / 3
    assert estimate_memory(seed_plan(mbs=4, recompute="full")).activations < base.activations / 10
    selective = estimate_memory(seed_plan(mbs=4, recompute="selective", recompute_modules=("moe_act",)))
    assert selective.activations < base.activations
    assert estimate_memory(seed_plan(mbs=4, optimizer="muon")).optimizer < base.optimizer
    assert estimate_memory(seed_plan(mbs=4, use_distributed_optimizer=False)).optimizer > base.optimizer
    assert estimate_memory(seed_plan(mbs=4, grad_reduce_in_fp32=True)).gradients == pytest.approx(2 * base.gradients,
                                                                                                   rel=1e-6)
    assert estimate_memory(seed_plan(mbs=4, dispatcher="deepep")).dispatcher > base.dispatcher
    # Expert state shards over expert-DP: ep 8 keeps 4x the experts per rank but splits their state over 4 ranks.
    assert estimate_memory(seed_plan(mbs=4, ep=8)).weights > 3 * base.weights


def test_distributed_optimizer_shards_over_dp_and_expert_dp() -> None:
    plan = small_plan(model="kimi_k2_proxy", ep=2)  # dp 8, expert-dp 4
    sharded = estimate_memory(plan).optimizer
    full = estimate_memory(with_(plan, use_distributed_optimizer=False)).optimizer
    assert full / 8 <= sharded <= full / 4


def test_summary_and_rule_message_carry_the_breakdown() -> None:
    est = estimate_memory(seed_plan(mbs=4))
    assert isinstance(est, MemoryEstimate) and est.fits and 100 * GIB < est.total < 200 * GIB
    line = est.summary()
    for word in ("GiB", "weights", "gradients", "optimizer", "activations", "dispatcher", "runtime", "pp rank"):
        assert word in line
    (v,) = TRAINING_RULES.check(seed_plan(mbs=32, gbs=1024))
    assert v.rule == "memory" and "does not fit" in v.message and "activations" in v.message and "268.0 GiB" in str(v)
    assert "+/- " in v.message and 'memory_check = "warn"' in v.fix


def test_verdict_follows_the_band() -> None:
    """fits below capacity - band, tight within the band either side (runs, warned), does not fit above + band."""
    from cloudai_mbridge.rules.training import memory_caution

    est = estimate_memory(seed_plan(mbs=4))
    for capacity, verdict in ((est.total + est.band + 1, "fits"), (est.total + est.band - 1, "tight"),
                              (est.total - est.band + 1, "tight"), (est.total - est.band - 1, "does not fit")):
        assert replace(est, capacity=capacity).verdict == verdict
    assert 3 < est.band_pct < 15 and f"+/- {est.band_pct:.0f} %" in est.headline()
    tight = seed_plan(mbs=12, gbs=384)  # 263.3 of 268.0 GiB, band 11 % (TP8: the overlapped shared expert's
    # gathered input, 2·s·b·h a MoE layer, measured at TP2 + SP, makes mbs 16 a "does not fit")
    assert estimate_memory(tight).verdict == "tight"
    assert not TRAINING_RULES.check(tight) and "memory is tight" in (memory_caution(tight) or "")
    over = seed_plan(mbs=32, gbs=1024)
    assert [v.rule for v in TRAINING_RULES.check(over)] == ["memory"]
    warned = replace(over, memory_check="warn")
    assert not TRAINING_RULES.check(warned) and "runs anyway" in (memory_caution(warned) or "")
    off = replace(over, memory_check="off")
    assert not TRAINING_RULES.check(off) and memory_caution(off) is None


def test_runtime_term_follows_the_communicators() -> None:
    """CUDA context + cuBLAS workspace + NCCL: its library once, then a communicator for each of the eight groups the
    step uses (one-rank groups too), larger when the group has peers (sizes measured on 1 and 2 GPUs)."""
    from cloudai_mbridge.plan.memory import RUNTIME, communicator_sizes, runtime_bytes

    r = RUNTIME
    one = small_plan(num_nodes=1, gpus_per_node=1, ep=1, gbs=1)
    assert communicator_sizes(one) == [1] * 8 and len(communicator_sizes(small_plan(cp=2))) == 9
    assert sum(runtime_bytes(one).values()) == pytest.approx(
        (r["cuda_context_gib"] + r["cublas_workspace_gib"] + r["nccl_library_gib"] + 8 * r["nccl_single_rank_gib"])
        * GIB, abs=8)
    # the mcore engine's recorded 1- and 2-GPU runs: 3.95 and 6.07 GiB outside the allocator
    two = small_plan(num_nodes=1, gpus_per_node=2, ep=2, gbs=2)
    assert sum(runtime_bytes(one).values()) / GIB == pytest.approx(3.95, rel=0.06)
    assert sum(runtime_bytes(two).values()) / GIB == pytest.approx(6.07, rel=0.06)
    big = seed_plan(model="deepseek_v3", gpu="h100", num_nodes=128, gpus_per_node=8, tp=2, pp=8, vp=4, ep=64,
                    gbs=8192)
    assert all(n > 1 for n in communicator_sizes(big))
    assert runtime_bytes(big)["nccl"] == pytest.approx((r["nccl_library_gib"] + 8 * r["nccl_with_peers_gib"]) * GIB,
                                                       abs=8)


# A tiny MoE model on one GPU for hand-computed bytes: h 64, 4 heads of dv 16, dense ffn 96, 8 experts top-2 of
# f 32, one shared expert of 32, vocab 1000 (padded to 1024), 2 layers (one dense, one MoE); seq 128, mbs 2.
TINY = replace(get_model("kimi_k2_proxy"), name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4,
               v_head_dim=16, qk_head_dim=16, qk_pos_emb_head_dim=8, q_lora_rank=32, kv_lora_rank=16,
               ffn_hidden_size=96, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=32,
               shared_expert_intermediate_size=32, vocab_size=1000, recipe_pp_vp=frozenset({(1, 1)}))


def tiny_plan(**overrides) -> TrainingPlan:
    fields = {"num_nodes": 1, "gpus_per_node": 1, "mbs": 2, "gbs": 2, "seq_length": 128, "sequence_parallel": False,
              "transformer_impl": "local", **overrides}
    return TrainingPlan(model=TINY, gpu=get_gpu("h200"), **fields)


def test_local_engine_builds_standard_attention_parameters() -> None:
    # linear_qkv h x 3·a·dv + linear_proj a·dv x h + input norm h (payload/train/mcore.py: kv_channels = dv, MHA)
    assert _attention_params(tiny_plan()) == 64 * 3 * 64 + 64 * 64 + 64 == 16448
    assert _attention_params(tiny_plan(transformer_impl="transformer_engine")) != 16448  # MLA


def test_local_engine_activations_by_hand() -> None:
    act = _activations(tiny_plan(), "none")
    tokens, scores = 2 * 128, 2 * 4 * 128 * 128  # T = b·s; one layer's score tensor: b·a·s² elements
    assert act.scores == scores
    # attention: norm in/out 2·T·2h, qkv output + rotated q, k + context 2·T·a·dv·6, fp32 softmax + bf16 probs 6 B
    attn = 2 * tokens * 2 * 64 + 2 * tokens * 64 * 6 + 6 * scores
    assert attn == 65536 + 196608 + 786432
    # dense MLP: norm in/out + unfused SwiGLU (fc1 out 2F, silu F, offset copy F, product F) 2·T·5F
    assert act.dense == attn + 2 * tokens * 2 * 64 + 2 * tokens * 5 * 96
    # MoE: norm in/out, fp32 router 8·T·E, overlapped shared expert 2·T·4fs, per copy 2h + 12f + 4
    moe = 2 * tokens * 2 * 64 + 8 * tokens * 8 + 2 * tokens * 4 * 32 + tokens * 2 * (2 * 64 + 12 * 32 + 4)
    assert moe == 65536 + 16384 + 65536 + 264192
    assert act.moe == attn + moe
    # core_attn recompute drops exactly the 6 B per score element; moe_act does nothing to SequentialMLP
    assert _activations(tiny_plan(recompute="selective", recompute_modules=("core_attn",)), "selective").moe == (
        act.moe - 6 * scores)
    assert _activations(tiny_plan(recompute="selective", recompute_modules=("moe_act",)), "selective").moe == act.moe


def test_local_engine_estimate_by_hand() -> None:
    plan = tiny_plan()
    est = estimate_memory(plan)
    act = _activations(plan, "none")
    scores = 2 * 4 * 128 * 128
    assert est.workspace == 2 * scores  # the persistent bf16 "mpu" buffer baddbmm is given
    saved = act.embedding + act.dense + act.moe + act.loss
    # backward phases of the last (MoE) layer: loss (logits' bf16 gradient 2·T·V), MoE block (logits freed, its
    # gradients as large as what it saved), attention (MoE block freed too, 10 B beyond the saved 6 per score)
    tokens, vocab = 2 * 128, 1024
    moe_block = act.moe - act.attention
    phases = (2 * tokens * vocab, moe_block - act.loss, -moe_block + 10 * scores - act.loss)
    assert phases == (524288, 411648 - 1572864, -411648 + 1310720 - 1572864)
    assert est.activations == int(saved + max(phases))  # the loss phase: this model's logits dwarf its layers
    # the same layers with a tiny vocabulary: the attention backward's score tensors set the peak
    small_vocab = replace(plan, model=replace(TINY, vocab_size=64))
    act64 = _activations(small_vocab, "none")
    assert estimate_memory(small_vocab).activations == int(
        act64.embedding + act64.dense + act64.moe + act64.loss - moe_block + 10 * scores - act64.loss)
    counts = _stage_counts(PipelineLayout.from_stages([["embedding", "decoder", "decoder", "loss"]], 1), 1)[0]
    params = _rank_params(plan, counts)
    held = params.dense + params.expert + params.embedding
    # dp = edp = 1: fp32 main grads 4 B + torch AdamW's foreach sqrt temporary 4 B per parameter
    assert est.step == 8 * held
    assert est.total == (est.weights + est.gradients + est.optimizer + est.workspace + est.dispatcher + est.runtime
                         + max(est.activations, est.step))


def test_step_term_follows_the_optimizer() -> None:
    plan = small_plan(model="kimi_k2_proxy", ep=2)  # dp 8, expert-dp 4
    te = estimate_memory(plan)
    local = estimate_memory(with_(plan, transformer_impl="local"))
    assert te.workspace == 0 and local.workspace > 0
    # TE's FusedAdam steps in place: only the fp32 main grads, a third of Adam's 12 B/param over the same shard
    assert te.step == pytest.approx(te.optimizer / 3, rel=1e-6)
    assert estimate_memory(with_(plan, use_megatron_fsdp=True)).step == 0  # FSDP skips the main-grad copy
    full = estimate_memory(with_(plan, use_distributed_optimizer=False))
    assert full.step > 4 * te.step  # Float16Optimizer: main grads for every parameter of the rank
    # the peak is one phase or the other: a step larger than the activations sets the total
    tiny = estimate_memory(tiny_plan(seq_length=16, mbs=1, gbs=1))
    assert tiny.step > tiny.activations
    assert tiny.total == (tiny.weights + tiny.gradients + tiny.optimizer + tiny.workspace + tiny.dispatcher
                          + tiny.runtime + tiny.step)
    assert "peak in the step" in tiny.summary()


def test_engine_sets_the_transformer_impl(tmp_path: Path) -> None:
    from cloudai.core import Registry, TestRun

    from cloudai_mbridge.registration import register

    register()
    cls = Registry().test_definitions_map["MBridgeTraining"]
    for engine, impl in (("mcore", "local"), ("bridge", "transformer_engine"), ("auto", "transformer_engine")):
        tdef = cls.model_validate({"name": "t", "description": "d", "test_template_name": "MBridgeTraining",
                                   "cmd_args": {"model": "kimi_k2_proxy", "gpu": "h200", "engine": engine, "tp": 1,
                                                "pp": 1, "ep": 1, "gbs": 8}})
        tr = TestRun(name="t", test=tdef, num_nodes=1, nodes=[], output_path=tmp_path, time_limit="01:00:00")
        assert tdef.plan(tr, None).transformer_impl == impl


def test_backward_working_space_by_phase() -> None:
    from cloudai_mbridge.plan.memory import _backward_working

    plan = tiny_plan(transformer_impl="transformer_engine")
    act = _activations(plan, "none")
    block = act.moe - act.attention
    # a pipeline rank without the loss stage: nothing is freed first; the MoE block's gradients (TE: no score term)
    assert _backward_working(plan, act, holds_loss=False) == max(block, -block + act.attention)
    # full recompute rebuilds the layer (its no-recompute activations, beside the saved input) before differentiating
    full = tiny_plan(transformer_impl="transformer_engine", recompute="full")
    saved = _activations(full, "full")
    assert _backward_working(full, saved, holds_loss=False) == act.moe - saved.moe + block
    # selective recompute brings back only what it dropped: less than full, more than none
    sel = tiny_plan(transformer_impl="transformer_engine", recompute="selective", recompute_modules=("moe_act",))
    dropped = act.moe - _activations(sel, "selective").moe
    assert dropped > 0 and _backward_working(sel, _activations(sel, "selective"), holds_loss=False) == dropped + block
    # a first pipeline stage holding dense layers only works on a dense layer
    assert _backward_working(plan, act, holds_loss=False, holds_moe=False) < _backward_working(plan, act, False)


def test_ncclep_buffers_follow_the_receive_budget() -> None:
    """plan/memory.py 6.: ncclep's buffers are sized by Rc = int(ceil64(T/t) x etp*k x cf), four bf16 row buffers and
    the fp32 weights; bf16 keeps the whole receive buffer as the experts' saved input, FP8 its own quantised copy."""
    from cloudai_mbridge.plan.memory import _dispatcher_bytes, ncclep_recv_rows

    ncclep = {"dispatcher": "ncclep", "bridge_version": "0.6"}
    plan = small_plan(model="deepseek_v3_proxy", **ncclep, moe_expert_rank_capacity_factor=1.5)
    h, k = plan.model.hidden_size, plan.model.moe_router_topk
    rows = int(4096 * k * 1.5)
    assert ncclep_recv_rows(plan) == rows == plan.ncclep_recv_capacity
    assert _dispatcher_bytes(plan) == 4 * rows * 2 * h + 4 * rows
    # twice the factor, twice the buffers; larger than the all-to-all default (send + receive of T*k tokens)
    double = with_(plan, moe_expert_rank_capacity_factor=3.0)
    assert _dispatcher_bytes(double) == 4 * (2 * rows) * 2 * h + 4 * (2 * rows)
    assert _dispatcher_bytes(plan) > _dispatcher_bytes(with_(plan, dispatcher="alltoall"))
    # bf16: each in-flight MoE layer keeps the (Rc - T*k) slack rows and their weights
    base = _activations(with_(plan, dispatcher="alltoall"), "none")
    act = _activations(plan, "none")
    assert act.moe - base.moe == pytest.approx((rows - 4096 * k) * (2 * h + 4))
    assert act.dense == base.dense
    fp8 = with_(plan, precision="fp8_tensorwise")
    assert _activations(fp8, "none").moe == _activations(with_(fp8, dispatcher="alltoall"), "none").moe
    # without a factor (a point the rules refuse) the balanced share stands in
    assert ncclep_recv_rows(with_(plan, moe_expert_rank_capacity_factor=None)) == 4096 * k


@pytest.mark.parametrize("model", ["kimi_k2", "deepseek_v3"])
def test_the_busiest_rank_from_a_few_ranks_is_the_maximum_over_all(model: str) -> None:
    """estimate_memory looks only at the first of ranks holding alike stages and remembers an estimate for every
    gbs past the micro-batch count that changes nothing (preflight's speed on a 100k grid); on deep pipelines, both
    schedules, few and many micro-batches, bf16 first/last layers and MTP, it must give the rank and the numbers
    of the maximum over every rank."""
    compared = 0
    for pp, vp in [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (16, 1), (16, 2), (32, 1)]:
        for gbs in (pp, 4 * pp, 1024, 16384):
            for precision in ("bf16", "fp8_tensorwise"):
                for mtp in (None, 1):
                    p = seed_plan(model, pp=pp, vp=vp if vp > 1 else None, gbs=gbs, precision=precision,
                                  mtp_num_layers=mtp)
                    if not (p.dp and p.expert_dp and p.experts_per_rank):
                        continue
                    every = estimate_ranks(p)
                    assert len(every) == p.pp
                    assert _estimate_memory(p) == max(every, key=lambda e: e.total), (pp, vp, gbs, precision, mtp)
                    # remembered under a smaller gbs past the micro-batch count that changes nothing
                    assert estimate_memory(p) == _estimate_memory(p), (pp, vp, gbs, precision, mtp)
                    compared += 1
    assert compared >= 60


def test_fine_grained_offloading_takes_the_modules_saved_tensors_off_all_but_the_last_layer() -> None:
    # DeepSeek-V3 proxy on one H100, bf16, no recompute: every layer of the model is in flight on the one rank
    base = small_plan(model="deepseek_v3_proxy", ep=1, recompute="none")
    act = _activations(base, "none")
    assert act.offload_dense == act.offload_moe == 0.0
    fc1 = replace(base, offload_modules=("expert_fc1",))
    attn = replace(base, offload_modules=("core_attn", "attn_proj"))
    a_fc1, a_attn = _activations(fc1, "none"), _activations(attn, "none")
    m = base.model
    local = base.seq_length * base.mbs  # tp = cp = 1
    # expert_fc1: the routed experts' permuted bf16 input, per routed copy, MoE layers only
    assert a_fc1.offload_dense == 0.0
    assert a_fc1.offload_moe == pytest.approx(local * m.moe_router_topk * 2 * m.hidden_size)
    # core_attn + attn_proj: q, k, v, the fp32 softmax statistics and linear_proj's input, every layer kind
    assert a_attn.offload_dense == a_attn.offload_moe > 0
    r0, r_fc1 = estimate_ranks(base)[0], estimate_ranks(fc1)[0]
    layers_in_flight = r0.in_flight * m.num_layers - m.first_k_dense * r0.in_flight  # MoE layers on the rank
    kept = a_fc1.offload_moe  # the last MoE layer's stays on the GPU
    assert r0.activations - r_fc1.activations == pytest.approx(layers_in_flight * a_fc1.offload_moe - kept, rel=1e-6)
    # nothing else moves, and a recompute of the whole MoE block leaves nothing for expert_fc1 to offload
    assert (r0.weights, r0.optimizer, r0.dispatcher) == (r_fc1.weights, r_fc1.optimizer, r_fc1.dispatcher)
    moe_rc = replace(fc1, recompute="selective", recompute_modules=("moe",))
    assert _activations(moe_rc, "selective").offload_moe == 0.0


def test_fp8_attention_keeps_q_k_v_at_one_byte() -> None:
    # DeepSeek-V3 (MLA: q and k of dq + dr, v of dv per head), MXFP8, no recompute: FP8 attention saves q, k, v in FP8
    plan = seed_plan(model="deepseek_v3", precision="mxfp8", recompute="none")
    fp8 = replace(plan, fp8_dot_product_attention=True)
    m = plan.model
    tokens = plan.seq_length * plan.mbs / plan.cp
    qkv = tokens * m.num_attention_heads / plan.tp * (2 * (m.qk_head_dim + m.qk_pos_emb_head_dim) + m.v_head_dim)
    a, b = _activations(plan, "none"), _activations(fp8, "none")
    assert a.moe - b.moe == pytest.approx(qkv)  # 2 bytes -> 1 byte per element
    assert a.dense - b.dense == pytest.approx(qkv)
    # the delayed recipe also keeps an FP8 copy of the attention output
    delayed, delayed_fp8 = replace(plan, precision="fp8_delayed"), replace(fp8, precision="fp8_delayed")
    out = tokens * m.num_attention_heads / plan.tp * m.v_head_dim
    assert _activations(delayed, "none").moe - _activations(delayed_fp8, "none").moe == pytest.approx(qkv - out)


def test_paged_stash_keeps_the_expert_rows_at_1_1_and_reloads_one_layer_at_the_budget() -> None:
    """HybridEP with paged stashing (and the TE op fuser, moe_expert_rank_capacity_factor cf) computes the experts on a
    static budget of cf times the balanced rows, stores their saved tensors at their real rows in a page buffer with
    10 % headroom and reloads one layer at the budget in backward (megatron-core 0.19.2). Without the stash the
    payload hands HybridEP no factor, so nothing changes."""
    base = seed_plan(model="deepseek_v3", precision="mxfp8", recompute="none", dispatcher="hybridep")
    cf = replace(base, moe_expert_rank_capacity_factor=1.5)
    stash = replace(cf, moe_paged_stash=True, use_transformer_engine_op_fuser=True)
    a, b, c = (_activations(x, "none") for x in (base, cf, stash))
    m = base.model
    copies = base.seq_length * base.mbs / base.cp / base.tp * m.moe_router_topk
    routed = copies * (1 * m.hidden_size + 4 * m.moe_ffn_hidden_size + 4 + 1 * m.moe_ffn_hidden_size)  # mxfp8
    assert b == a  # the factor alone reaches no HybridEP point
    assert c.moe - a.moe == pytest.approx(0.1 * routed)  # the stash's headroom
    assert a.dense == c.dense and a.stash_reload == 0.0
    assert c.stash_reload == pytest.approx(1.5 * routed)  # one layer reloaded at the budget's rows
    # the reload is in the backward's working space once, not in every in-flight layer
    r_base, r_stash = estimate_ranks(base)[0], estimate_ranks(stash)[0]
    layers = r_base.in_flight * (m.num_layers - m.first_k_dense)
    assert r_stash.activations - r_base.activations < layers * 0.1 * routed + 1.5 * routed + 1
    assert r_stash.activations > r_base.activations


def test_optimizer_cpu_offload_keeps_only_the_gpu_share_of_the_optimizer() -> None:
    """Megatron-Core's HybridDeviceOptimizer: the offloaded share's fp32 copy and states live on the host; the rest
    keeps an fp32 copy and fp32 moments on the GPU (12 B), and the step's fp32 gradients only for that share."""
    base = seed_plan(model="deepseek_v3", precision="mxfp8", precision_aware_optimizer=True)
    r0 = estimate_ranks(base)[0]
    whole = estimate_ranks(replace(base, optimizer_cpu_offload=True, optimizer_offload_fraction=1.0))[0]
    half = estimate_ranks(replace(base, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5))[0]
    assert r0.optimizer > 0 and whole.optimizer == 0 and whole.step == 0
    assert half.optimizer == pytest.approx(r0.optimizer * 12 / 8 / 2, rel=1e-6)  # 12 B on half of what had 8 B
    assert half.step == pytest.approx(r0.step / 2, rel=1e-6)
    assert (whole.weights, whole.gradients, whole.activations) == (r0.weights, r0.gradients, r0.activations)
    assert whole.total < half.total < r0.total


def test_a_refusal_names_the_memory_the_points_own_settings_leave_on_the_table() -> None:
    """NeMo 2.0's DeepSeek-V3 full SFT (TP16 PP7 EP4 on 448 H100) leaves expert_tensor_parallel_size unset, which
    Megatron-Core turns into tp; written with this project's default etp = 1 it does not fit, and the fix says why."""
    plan = seed_plan(model="deepseek_v3", gpu="h100", num_nodes=56, gpus_per_node=8, network="ib", tp=16, pp=7,
                     ep=4, etp=1, mbs=1, gbs=128, seq_length=2048, recompute="none", mtp_num_layers=0,
                     precision_aware_optimizer=True)
    (memory,) = [v for v in TRAINING_RULES.check(plan) if v.rule == "memory"]
    assert "etp = 16" in memory.fix and "optimizer_cpu_offload = true" in memory.fix
    assert memory.fields["etp"] == 1
    assert not [v for v in TRAINING_RULES.check(replace(plan, etp=16)) if v.rule == "memory"]  # and it then fits
