"""CloudAI's own ``training_report.json`` for an MBridgeTraining run, built from our parsed logs.

CloudAI writes that file for its training workloads (``cloudai/report_generator/training``) from TensorBoard events;
our runs have none, so the same dataclasses (``TrainingResults``, imported, not copied) are filled from
:func:`cloudai_mbridge.metrics.parse_run` and the run's ``mbridge_config.json``, and the aggregation window follows
CloudAI's parser: the first ``exclude_start_steps`` steps dropped, ``StepAggregation.from_steps`` over the rest
(None when none remain). Our runs have no profiling window, so ``profiling_enabled`` stays False.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from cloudai.report_generator.training.models import StepAggregation, TrainingConfig, TrainingResults, TrainingStep

from ..catalog.models import get_model
from ..metrics.training import MemoryReport, TrainingRunMetrics

REPORT_FILE = "training_report.json"
TEST_TEMPLATE = "MBridgeTraining"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _memory_series(m: TrainingRunMetrics) -> list[MemoryReport]:
    """The memory reports of the lowest rank that logged both allocated and reserved bytes, by iteration."""
    usable = [r for r in m.memory
              if _finite(r.allocated_bytes) is not None and _finite(r.reserved_bytes) is not None]
    if not usable:
        return []
    rank = min(r.rank for r in usable)
    return sorted((r for r in usable if r.rank == rank), key=lambda r: r.after_iterations)


def _memory_at(series: list[MemoryReport], iteration: int) -> MemoryReport:
    """The report logged at or nearest before ``iteration``; before the first report, the first one."""
    best = series[0]
    for r in series:
        if r.after_iterations > iteration:
            break
        best = r
    return best


def training_steps(m: TrainingRunMetrics) -> tuple[list[TrainingStep], str | None]:
    """(steps, why there are none).

    One step per parsed iteration line with a finite iteration time (ms -> ``step_time_sec``) and a finite lm loss;
    like CloudAI's parser, an iteration missing a required value is left out. ``tflops_per_gpu`` is ours (None when
    the line had none). Memory: Megatron/Bridge log memory only at some iterations (Bridge: after iterations 1 and
    2, on rank 0), not every step, so each step carries the lowest logging rank's ``allocated`` / ``reserved`` bytes
    of the report nearest at or before it (a step before the first report carries the first report). CloudAI's
    ``TrainingStep`` requires float memory and NaN is not valid JSON, so a run that logged no memory gets no steps
    (and no report)."""
    series = _memory_series(m)
    if not series:
        return [], "the run logged no memory report (CloudAI's TrainingStep requires memory; NaN is not valid JSON)"
    steps: list[TrainingStep] = []
    for r in m.iterations:
        elapsed, loss = _finite(r.elapsed_ms), _finite(r.lm_loss)
        if elapsed is None or loss is None:
            continue
        mem = _memory_at(series, r.iteration)
        steps.append(TrainingStep(
            iteration=r.iteration,
            step_time_sec=elapsed / 1000.0,
            loss=loss,
            memory_reserved_bytes=float(mem.reserved_bytes),  # type: ignore[arg-type]
            memory_allocated_bytes=float(mem.allocated_bytes),  # type: ignore[arg-type]
            tflops_per_gpu=_finite(r.tflops_per_gpu),
        ))
    if not steps:
        return [], "no iteration with a finite iteration time and lm loss"
    return steps, None


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _model(config: Mapping[str, Any]) -> Mapping[str, Any]:
    model = config.get("model")
    if isinstance(model, Mapping):
        return model
    if isinstance(model, str):
        return asdict(get_model(model))
    raise ValueError("mbridge_config.json has no model")


def training_config(config: Mapping[str, Any]) -> TrainingConfig:
    """CloudAI's TrainingConfig from our run config (``mbridge_config.json``) and its catalog model.

    MLA models have no GQA: ``num_query_groups`` = heads; ``kv_channels`` is what Bridge holds for our models
    (the model's ``qk_pos_emb_head_dim``, see plan/bridge_estimate.py). DeepSeek-V3 family: RMSNorm, RoPE."""
    model = _model(config)
    tp, pp, cp = _int(config, "tp", 1), _int(config, "pp", 1), _int(config, "cp", 1)
    world = _int(config, "world_size")
    dp = _int(config, "dp")
    if dp is None and world and tp and pp and cp and world % (tp * pp * cp) == 0:
        dp = world // (tp * pp * cp)
    num_experts = model.get("num_experts") or None
    cfg = TrainingConfig(
        micro_batch_size=int(config["mbs"]),
        global_batch_size=int(config["gbs"]),
        seq_length=int(config["seq_length"]),
        tensor_parallel_size=tp,  # type: ignore[arg-type]
        pipeline_parallel_size=pp,  # type: ignore[arg-type]
        context_parallel_size=cp,
        virtual_pipeline_parallel_size=_int(config, "vp"),
        sequence_parallel=bool(config.get("sequence_parallel", False)),
        expert_parallel_size=_int(config, "ep", 1),  # type: ignore[arg-type]
        data_parallel_size=dp,
        num_layers=int(model["num_layers"]),
        hidden_size=int(model["hidden_size"]),
        num_attention_heads=int(model["num_attention_heads"]),
        num_query_groups=int(model["num_attention_heads"]),
        ffn_hidden_size=int(model["ffn_hidden_size"]),
        kv_channels=int(model["qk_pos_emb_head_dim"]),
        normalization="RMSNorm",
        position_embedding_type="rope",
        model_name=str(model.get("name", "")),
        num_experts=num_experts,
        moe_router_topk=model.get("moe_router_topk") if num_experts else None,
        moe_ffn_hidden_size=model.get("moe_ffn_hidden_size") if num_experts else None,
        # our config does not say (the payload leaves Bridge's provider default): unknown unless it does
        moe_grouped_gemm=config.get("moe_grouped_gemm") if isinstance(config.get("moe_grouped_gemm"), bool) else None,
        world_size=world,
        num_nodes=_int(config, "num_nodes", 0),  # type: ignore[arg-type]
    )
    cfg.test_template_name = TEST_TEMPLATE
    return cfg


def _aggregate(steps: list[TrainingStep], config: TrainingConfig) -> StepAggregation | None:
    """CloudAI's window: the first ``exclude_start_steps`` dropped (no profiling window in our runs)."""
    kept = steps[config.exclude_start_steps:]
    return StepAggregation.from_steps(kept) if kept else None


def training_results(m: TrainingRunMetrics) -> tuple[TrainingResults | None, str | None]:
    """(CloudAI's TrainingResults for the run, None) or (None, why the run gets no training_report.json)."""
    steps, why = training_steps(m)
    if not steps:
        return None, why
    try:
        config = training_config(m.config)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"mbridge_config.json lacks what CloudAI's TrainingConfig needs ({exc!r})"
    return TrainingResults(config=config, steps=steps, aggregation=_aggregate(steps, config)), None


def training_report_text(m: TrainingRunMetrics, name: str = "") -> str | None:
    """The run's training_report.json text (strict JSON: no NaN/Infinity), or None with one log line saying why."""
    results, why = training_results(m)
    if results is None:
        logging.info("%s: no %s in %s: %s", name or m.run_dir.name, REPORT_FILE, m.run_dir, why)
        return None
    return json.dumps(asdict(results), indent=2, allow_nan=False) + "\n"


def results_from_json(data: Mapping[str, Any]) -> TrainingResults:
    """A training_report.json's dict back into CloudAI's dataclasses (for readers and tests)."""
    from cloudai.report_generator.training.models import MetricStats

    agg = data.get("aggregation")
    aggregation = None
    if agg is not None:
        aggregation = StepAggregation(**{
            f.name: None if agg.get(f.name) is None else MetricStats(**agg[f.name]) for f in fields(StepAggregation)
        })
    return TrainingResults(
        config=TrainingConfig(**data["config"]),
        steps=[TrainingStep(**s) for s in data["steps"]],
        aggregation=aggregation,
    )


def write_training_report(run_dir: Path, m: TrainingRunMetrics) -> Path | None:
    """Write the run's training_report.json atomically (None: not written, see the log line)."""
    from ..atomic import write_atomic
    from ..redact import redact_report

    text = training_report_text(m)
    return None if text is None else write_atomic(Path(run_dir) / REPORT_FILE, redact_report(text))
