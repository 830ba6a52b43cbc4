"""Source and destination models: real Megatron-Core GPT MoE models (local, non-TE spec) on their own groups.

What is built, and why:
- `GPTModel` with `get_gpt_layer_local_spec(num_experts, moe_grouped_gemm=False)`: every layer is a MoE layer with
  `SequentialMLP` experts (`...mlp.experts.local_experts.<K>...`), a router and optional shared experts. Transformer
  Engine is absent from the CPU test machine and the device image, so the local spec is the one both can run.
- Plain (GQA) self-attention, RoPE, RMSNorm, SwiGLU, no biases, untied embeddings (as Kimi-K2 and DeepSeek-V3).
  Multi-latent attention is left out: refit moves every parameter the same way whatever attention produced it, and
  MLA would add five model fields the schema does not carry.
- The token dispatcher is "allgather": the all-to-all dispatcher creates a CUDA stream in its constructor and the
  dispatcher plays no part in refit.
- `perform_initialization` stays on because Megatron only stamps the tensor-parallel attributes the planner reads
  (`tensor_model_parallel`, `partition_dim`, `partition_stride`) inside its init helpers; the init function itself
  is a no-op since verification overwrites every weight anyway (this keeps Kimi-K2-sized builds fast on GPUs).
"""

from __future__ import annotations

import torch

from .config import RefitConfig, SideLayout, padded_vocab_size

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _skip_init(tensor: torch.Tensor) -> None:
    """Init method that leaves the storage as allocated: verification fills every parameter itself."""
    del tensor


def transformer_config(cfg: RefitConfig, side: SideLayout):
    from megatron.core.transformer.transformer_config import TransformerConfig

    m = cfg.model
    dtype = TORCH_DTYPES[cfg.dtype]
    return TransformerConfig(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        tensor_model_parallel_size=side.tp,
        pipeline_model_parallel_size=side.pp,
        expert_model_parallel_size=side.ep,
        expert_tensor_parallel_size=side.etp,
        sequence_parallel=False,
        num_moe_experts=m.num_experts,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_router_topk=m.moe_router_topk,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_token_dispatcher_type="allgather",
        moe_grouped_gemm=False,
        moe_router_dtype="fp32",
        add_bias_linear=False,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        normalization="RMSNorm",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype is torch.bfloat16,
        fp16=dtype is torch.float16,
        use_cpu_initialization=cfg.device == "cpu",
        perform_initialization=True,
        init_method=_skip_init,
        output_layer_init_method=_skip_init,
        embedding_init_method=_skip_init,
    )


def seed_cuda_rng_tracker(seed: int) -> None:
    """GPU init helpers fork Megatron's CUDA RNG tracker even with a no-op init; it needs its states registered.

    The ranks passed are placeholders: they only decorrelate random streams, and nothing random is drawn here.
    """
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    model_parallel_cuda_manual_seed(seed, tp_rank=0, ep_rank=0, etp_rank=0)


def build_model(cfg: RefitConfig, side: SideLayout, pg_collection):
    """The side's GPTModel stage on this rank (pre/post process from the PP rank)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    config = transformer_config(cfg, side)
    pp_rank = pg_collection.pp.rank()
    spec = get_gpt_layer_local_spec(num_experts=cfg.model.num_experts, moe_grouped_gemm=False, normalization="RMSNorm")
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab_size(cfg),
        max_sequence_length=cfg.model.seq_length,
        pre_process=pp_rank == 0,
        post_process=pp_rank == side.pp - 1,
        parallel_output=True,
        share_embeddings_and_output_weights=False,
        position_embedding_type="rope",
        pg_collection=pg_collection,
    )
    # Parameters are created on the GPU already, except the torch norms of the local spec (WrappedTorchNorm).
    return (model.cuda() if cfg.device == "cuda" else model).eval()


class AbsentSide(torch.nn.Module):
    """Stand-in for the side a rank does not hold (non-collocated mode on megatron-core < 0.17).

    megatron-core 0.16 needs a module for both sides on every rank; one without parameters contributes no
    metadata to the plan. It carries the side's `config` (for num_moe_experts) and a `pg_collection` whose `dp`
    is set only so that `reshard_model_weights` does not reach for the uninitialised global parallel_state.
    """

    def __init__(self, config, pg_collection) -> None:
        super().__init__()
        self.config = config
        self.pg_collection = pg_collection


def absent_side(cfg: RefitConfig, side: SideLayout) -> AbsentSide:
    import torch.distributed as dist
    from megatron.core.process_groups_config import ProcessGroupCollection

    return AbsentSide(transformer_config(cfg, side), ProcessGroupCollection(dp=dist.group.WORLD))
