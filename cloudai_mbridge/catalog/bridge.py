"""What differs between Megatron-Bridge releases that the rules mirror, one entry per release series.

Read from the released wheels (megatron-bridge 0.3.0, 0.4.2, 0.5.1, 0.6.2 on PyPI, 2026-11-24):

- The DeepSeek-V3 recipe's (PP, VP) layout table (``set_deepseek_v3_pipeline_model_parallel_layout``): the same seven
  pairs in every release read; 0.6 moved it to ``recipes/deepseek/h100/deepseek_v3.py`` (the old module is an alias).
- The DeepEP allowlist of ``training/flex_dispatcher_backend.py apply_flex_dispatcher_backend``: compute capability
  8.x / 9.x, or a Blackwell device by name. 0.3 compares the whole name (``device_properties.name in ["NVIDIA B200",
  "NVIDIA B300"]``), so a B300, which reports ``NVIDIA B300 SXM6 AC``, is skipped there and trains with all-to-all;
  0.4 and later compare the prefix (``name.startswith(...)``).
- The HybridEP allowlist: compute capability 8.x / 9.x / 10.x in all of them.
- The flex backends ``apply_flex_dispatcher_backend`` takes: ``deepep`` and ``hybridep`` in every release read;
  ``ncclep`` (NCCL EP through Transformer Engine's ``transformer_engine.pytorch.ep``) only from 0.6.2, on compute
  capability 9.x / 10.x (0.6.2 L80-L88: "NCCL EP is only applicable to Hopper and Blackwell GPUs", else a warning and
  all-to-all; ``validate_flex_dispatcher_backend`` L121-L125 raises). Older releases log "Not a valid flex
  dispatcher backend ... Skipping" and keep what the model had (0.5.1 L65-L68; the payload starts from all-to-all,
  so that is a downgrade it stops). The 0.6.0 and 0.6.1 wheels do not take ``ncclep`` either: ``bridge_version =
  "0.6"`` stands for 0.6.2 here, the release the series' entries were read from; a 0.6.0 / 0.6.1 container
  downgrades and the payload's dispatcher check stops the run. Its Megatron-Core is 0.19 (0.19.2 on PyPI), the
  first with the ``ncclep`` backend (``transformer_config.py`` L869; 0.18 has ``deepep`` / ``hybridep`` only).
- CUDA graphs: 0.6's ``utils/cuda_graph.py`` (L134-L155) runs ``cuda_graph_impl = "local"`` only as a full-iteration
  graph; 0.3-0.5 also take per-layer local graphs.
- The MoE all-to-all overlap (``overlap_moe_expert_parallel_comm``): Megatron-Core 0.17.1 (transformer_config.py
  L2137-L2141) refuses one MTP layer at pp = 1 and (L2143-L2151) any CUDA graph but Transformer Engine's; 0.19.2
  (L2709-L2713, L2738-L2746) drops the MTP check and checks the scope of Transformer Engine graphs only, so a
  full-iteration graph (``cuda_graph_impl = "full_iteration"``, or Bridge 0.6's ``"local"`` with scope
  ``full_iteration``, utils/cuda_graph.py L121-L131) runs with the overlap. "0.3" and "0.5" keep 0.4's checks.
- Kimi-K2: 0.4/0.5's ``kimi_k2_pretrain_config(optimizer_type=...)``; 0.6's takes no argument and configures Muon,
  ``_apply_kimi_k2_optimizer`` switches it (the payload calls it). The (pp, vp) tables are the same in every release
  read: DeepSeek-V3's seven pairs, Kimi-K2's eight (``KIMI_K2_LAYOUT_PP_VP``).
- MXFP8 param gather with Muon: Megatron-Core 0.17.1's optimizer step needs DistributedOptimizer's param buffer
  (optimizer/optimizer.py L580-L584), which Muon's optimizer lacks; 0.19.2 (L795-L806) falls back instead. Upstream's
  Kimi-K2 MXFP8 configs switch the gather off for Muon in both (the payload does too).

The release a job gets is the test's ``bridge_version``, else the one its container ships (NGC ``nemo:26.04`` ships
Megatron-Bridge 0.4.2, the image seed 000 ran), else ``DEFAULT_BRIDGE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GPUSpec

DSV3_LAYOUT_PP_VP = frozenset({(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)})
# Kimi-K2's own recipe table (recipes/kimi/kimi_k2.py _get_kimi_k2_pipeline_layout, 0.4.2 L28-L50; 0.6.2
# recipes/kimi/h100/kimi_k2.py L29-L51): DeepSeek-V3's pairs without the MTP tail, plus (2, 8); any other pair is a
# ValueError there (DeepSeek-V3's helper leaves such a pair without a layout).
KIMI_K2_LAYOUT_PP_VP = DSV3_LAYOUT_PP_VP | {(2, 8)}

# What torch.cuda.get_device_properties(0).name reports, where it is more than "NVIDIA <catalog name>".
DEVICE_NAMES = {"b300": "NVIDIA B300 SXM6 AC", "h100": "NVIDIA H100 80GB HBM3"}


@dataclass(frozen=True)
class BridgeRelease:
    version: str
    deepep_names: tuple[str, ...]  # Blackwell device names on the DeepEP allowlist
    deepep_name_prefix: bool  # True: the name must start with one of them; False: equal one of them
    deepep_cc_majors: tuple[int, ...] = (8, 9)
    hybridep_cc_majors: tuple[int, ...] = (8, 9, 10)
    # the backends apply_flex_dispatcher_backend configures (anything else: "Not a valid flex dispatcher backend")
    flex_backends: tuple[str, ...] = ("deepep", "hybridep")
    ncclep_cc_majors: tuple[int, ...] = (9, 10)  # 0.6.2 training/flex_dispatcher_backend.py L81
    dsv3_layout_pp_vp: frozenset[tuple[int, int]] = DSV3_LAYOUT_PP_VP
    # 0.6's utils/cuda_graph.py (L134-L155) accepts cuda_graph_impl "local" only for a full-iteration graph
    local_graph_full_iteration_only: bool = False
    # Settings of Bridge 0.6.2's perf recipes that not every release has, as cmd_args ("name" or "name=value"):
    # those this release's Megatron-Core takes with the same meaning; the others are refused (recipe062-fields).
    # Read from the wheels, file:line per release:
    #   offload_modules (fine_grained_activation_offloading): 0.17.1 transformer_config.py L1007-L1024, checks
    #     L1448-L1472 (not with cpu_offloading; attn_proj only with core_attn); 0.19.2 L1229-L1234, checks
    #     L1848-L1870, the same two checks. The module "fused_group_mlp" is 0.19.2's only (allowed set L1853-L1862,
    #     L1895-L1896 needs the TE op fuser; 0.17.1's set L1453-L1461 lacks it): "offload_modules=fused_group_mlp".
    #   outer_dp_sharding_strategy (HSDP outer group, "no_shard" / "optim"): 0.17.1
    #     distributed/distributed_data_parallel_config.py L153-L157; 0.19.2 L162-L166, the same text.
    #   0.19.2 only (absent from every file of the 0.17.1 wheel): moe_paged_stash (transformer_config.py L1268,
    #     checks L1904-L1920), use_transformer_engine_op_fuser (L511), fp8_output_proj (L614, checks L1442),
    #     cuda_graph_impl "full_iteration" (L1041).
    #   In both, so not listed (every release takes them): use_megatron_fsdp, data_parallel_sharding_strategy,
    #     num_distributed_optimizer_instances, fp8_param_gather (distributed_data_parallel_config.py 0.17.1
    #     L83 / L93 / L32 / L71, 0.19.2 L90 / L100 / L34 / L78), fp8_dot_product_attention (transformer_config.py
    #     0.17.1 L549, 0.19.2 L619), delay_wgrad_compute (model_parallel_config.py 0.17.1 L261, 0.19.2 L348; its
    #     a2a-overlap check transformer_config.py 0.17.1 L2153-L2157, 0.19.2 L2748-L2752).
    # "0.4" is Megatron-Core 0.17.1; "0.3" and "0.5" were not read: they take none of them.
    newer_fields: frozenset[str] = frozenset()
    # Megatron FSDP with a full-iteration CUDA graph (megatron_fsdp_cuda_graph_mode; Bridge 0.6.2's GB300 HSDP
    # recipe, perf_recipes/deepseek/gb300/deepseek_v3.py L334-L336)
    fsdp_full_iteration_graph: bool = False
    # a2a overlap with one MTP layer needs pp > 1 (Megatron-Core 0.17.1 transformer_config.py L2137-L2141; gone in
    # 0.19.2, whose check is L2709-L2713: mtp_num_layers in (None, 0, 1) only)
    a2a_overlap_mtp_needs_pp: bool = True
    # a2a overlap with a full-iteration CUDA graph (0.19.2 transformer_config.py L2738-L2746 checks Transformer
    # Engine graphs only; 0.17.1 L2143-L2151 takes Transformer Engine graphs only)
    a2a_overlap_full_iteration_graph: bool = False
    # MXFP8 param gather needs a distributed optimizer's param buffer: Megatron-Core 0.17.1's optimizer step calls
    # _copy_main_params_to_param_buffer unguarded (optimizer/optimizer.py L580-L584; only DistributedOptimizer defines
    # it), so Muon (optimizer/muon.py: Float16OptimizerWithFloat16Params) fails there; 0.19.2 (L795-L806) falls back
    # to copying into the model params when the optimizer has no such buffer
    mxfp8_gather_needs_distributed_optimizer: bool = True
    # Fine-grained activation offloading inside a full-iteration CUDA graph needs a cap on in-flight offloads
    # (megatron-core 0.19.2 transformer_config.py L2634-L2642: fine_grained_offloading_max_inflight_offloads must be
    # an integer >= 0); 0.17.1 has neither the field nor any offloading check against CUDA graphs
    offload_full_iteration_needs_inflight_cap: bool = False

    def deepep_allowed(self, gpu: GPUSpec) -> bool:
        name = device_name(gpu)
        by_name = name.startswith(self.deepep_names) if self.deepep_name_prefix else name in self.deepep_names
        return gpu.compute_capability[0] in self.deepep_cc_majors or by_name

    def hybridep_allowed(self, gpu: GPUSpec) -> bool:
        return gpu.compute_capability[0] in self.hybridep_cc_majors

    def ncclep_allowed(self, gpu: GPUSpec) -> bool:
        return "ncclep" in self.flex_backends and gpu.compute_capability[0] in self.ncclep_cc_majors

    def takes_backend(self, backend: str) -> bool:
        """Whether this release's apply_flex_dispatcher_backend knows the flex backend at all."""
        return backend in self.flex_backends

    def deepep_rule_text(self) -> str:
        how = "starting with" if self.deepep_name_prefix else "equal to"
        return (f"compute capability {'/'.join(f'{m}.x' for m in self.deepep_cc_majors)} or a device name {how} "
                + " / ".join(repr(n) for n in self.deepep_names))


_BLACKWELL = ("NVIDIA B200", "NVIDIA B300")
BRIDGE_RELEASES = {
    "0.3": BridgeRelease("0.3", _BLACKWELL, deepep_name_prefix=False),
    "0.4": BridgeRelease("0.4", _BLACKWELL, deepep_name_prefix=True,
                         newer_fields=frozenset({"offload_modules", "outer_dp_sharding_strategy"})),
    "0.5": BridgeRelease("0.5", _BLACKWELL, deepep_name_prefix=True),
    "0.6": BridgeRelease("0.6", _BLACKWELL, deepep_name_prefix=True, local_graph_full_iteration_only=True,
                         flex_backends=("deepep", "hybridep", "ncclep"),
                         newer_fields=frozenset({"moe_paged_stash", "use_transformer_engine_op_fuser",
                                                 "fp8_output_proj", "offload_modules", "outer_dp_sharding_strategy",
                                                 "cuda_graph_impl=full_iteration",
                                                 "offload_modules=fused_group_mlp",
                                                 "fine_grained_offloading_max_inflight_offloads"}),
                         fsdp_full_iteration_graph=True, a2a_overlap_mtp_needs_pp=False,
                         a2a_overlap_full_iteration_graph=True, mxfp8_gather_needs_distributed_optimizer=False,
                         offload_full_iteration_needs_inflight_cap=True),
}
DEFAULT_BRIDGE = "0.4"
# Container image (without registry tag suffix beyond the release) -> the Megatron-Bridge release it ships.
CONTAINER_BRIDGE = {"nvcr.io/nvidia/nemo:26.04": "0.4"}


def device_name(gpu: GPUSpec) -> str:
    return DEVICE_NAMES.get(gpu.name, f"NVIDIA {gpu.name.upper()}")


def bridge_release(version: str | None = None, container_image: str | None = None) -> BridgeRelease:
    """The test's bridge_version, else its container's, else the default; an unknown version is a ValueError."""
    if version is None and container_image:
        version = next((v for prefix, v in CONTAINER_BRIDGE.items() if container_image.startswith(prefix)), None)
    version = version or DEFAULT_BRIDGE
    try:
        return BRIDGE_RELEASES[version]
    except KeyError:
        raise ValueError(f"bridge_version = {version!r} is not one of {', '.join(BRIDGE_RELEASES)}") from None
