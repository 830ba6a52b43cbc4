"""CloudAI's own ``training_report.json`` for an MBridgeTraining run, built from our parsed logs.

CloudAI writes that file for its training workloads (``cloudai/report_generator/training``) from TensorBoard events;
our runs have none, so the same dataclasses (``TrainingResults``, imported, not copied) are filled from
:func:`cloudai_mbridge.metrics.parse_run` and the run's ``mbridge_config.json``, and the aggregation window follows
CloudAI's parser: the first ``exclude_start_steps`` steps dropped, ``StepAggregation.from_steps`` over the rest
(None when none remain). Our runs have no profiling window, so ``profiling_enabled`` stays False.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import statistics
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from cloudai.report_generator.training.models import StepAggregation, TrainingConfig, TrainingResults, TrainingStep

from ..catalog.models import get_model
from ..metrics.training import MemoryReport, TrainingRunMetrics, field_values

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


def _memory_at(series: list[MemoryReport], keys: list[int], iteration: int) -> MemoryReport:
    """The report logged at or nearest before ``iteration``; before the first report, the first one. ``keys``: the
    series' ``after_iterations`` (a binary search: a 10^6-iteration run with a report every 100 iterations took
    minutes with a scan per step)."""
    return series[max(bisect.bisect_right(keys, iteration) - 1, 0)]


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
        return [], NO_MEMORY
    steps = list(_steps(m, series))
    if not steps:
        return [], NO_STEPS
    return steps, None


NO_MEMORY = "the run logged no memory report (CloudAI's TrainingStep requires memory; NaN is not valid JSON)"
NO_STEPS = "no iteration with a finite iteration time and lm loss"


def _rows(m: TrainingRunMetrics, series: list[MemoryReport]) -> Iterator[tuple[Any, ...]]:
    """The steps' values in :data:`STEP_FIELDS` order, one step at a time, read from the records' columns (no record
    built per iteration)."""
    keys = [r.after_iterations for r in series]
    columns = (field_values(m.iterations, name) for name in ("iteration", "elapsed_ms", "lm_loss", "tflops_per_gpu"))
    for iteration, elapsed_ms, lm_loss, tflops in zip(*columns, strict=True):
        elapsed, loss = _finite(elapsed_ms), _finite(lm_loss)
        if elapsed is None or loss is None:
            continue
        mem = _memory_at(series, keys, iteration)
        yield (iteration, elapsed / 1000.0, loss, float(mem.reserved_bytes),  # type: ignore[arg-type]
               float(mem.allocated_bytes), _finite(tflops))  # type: ignore[arg-type]


def _steps(m: TrainingRunMetrics, series: list[MemoryReport]) -> Iterator[TrainingStep]:
    """:func:`training_steps`' steps one at a time (never all held: see :func:`training_report_chunks`)."""
    for row in _rows(m, series):
        yield TrainingStep(**dict(zip(STEP_FIELDS, row, strict=True)))


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
    chunks = training_report_chunks(m, name)
    return None if chunks is None else "".join(chunks)


STEP_FIELDS = tuple(f.name for f in fields(TrainingStep))
STEP_BATCH = 4096  # steps per piece of text handed on (about 1 MB)
METRICS = tuple(f.name for f in fields(StepAggregation))  # step_time_sec, loss, memory_*, tflops_per_gpu
_METRIC_AT = tuple((k, STEP_FIELDS.index(k)) for k in METRICS)


class _Aggregation:
    """CloudAI's ``StepAggregation.from_steps`` over the steps after the first ``exclude`` ones, fed one step at a
    time. Up to ``stats.SAMPLE_CAP`` steps it keeps every value and calls CloudAI's own ``MetricStats.from_values``
    (the same numbers as before); past the cap, memory stays bounded: mean (exact sum), min, max and population std
    of every value streamed, t99 / t95 from a 1-in-2^k systematic sample, which :attr:`note` says."""

    def __init__(self, exclude: int, cap: int | None = None) -> None:
        from ..metrics.stats import SAMPLE_CAP

        self.exclude, self.seen, self.cap = exclude, 0, cap or SAMPLE_CAP
        self.values: dict[str, array] | None = {k: array("d") for k in METRICS}
        self.series: dict[str, Any] | None = None

    def add(self, values: tuple[Any, ...]) -> None:
        """One step's values in :data:`STEP_FIELDS` order."""
        self.seen += 1
        if self.seen <= self.exclude:
            return
        row = {k: values[i] for k, i in _METRIC_AT}
        if self.values is not None:
            for k, v in row.items():
                if v is not None:
                    self.values[k].append(v)
            if len(self.values["step_time_sec"]) > self.cap:
                from ..metrics.stats import StreamedSeries

                self.series = {k: StreamedSeries("d", self.cap) for k in METRICS}
                for k, kept in self.values.items():
                    for v in kept:
                        self.series[k].add(v)
                self.values = None
            return
        assert self.series is not None
        for k, v in row.items():
            if v is not None:
                self.series[k].add(v)

    @property
    def note(self) -> str | None:
        if self.series is None:
            return None
        s = self.series["step_time_sec"]
        return (f"{REPORT_FILE}: aggregation t99 and t95 from a 1-in-{s.sample.stride} sample ({len(s.sample):,} steps)"
                f" of {s.count:,}; mean, min, max and std of all; every step is listed")

    def result(self) -> StepAggregation | None:
        from cloudai.report_generator.training.models import MetricStats

        if self.values is not None:
            if not self.values["step_time_sec"]:
                return None
            got = {k: MetricStats.from_values(list(v)) if v else None for k, v in self.values.items()}
            return StepAggregation(**got)
        assert self.series is not None

        def stats(series: Any) -> MetricStats | None:
            if not series.count:
                return None
            q = statistics.quantiles(list(series.sample.columns[0]), n=100, method="inclusive")
            return MetricStats(mean=series.mean, min=series.lo, max=series.hi, std=math.sqrt(series.m2 / series.count),
                               t99=q[98], t95=q[94])

        return StepAggregation(**{k: stats(v) for k, v in self.series.items()})


def _scalar(value: Any) -> str:
    """One value as ``json.dumps(..., allow_nan=False)`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return float.__repr__(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__repr__(value)
    return json.dumps(value, allow_nan=False)


_STEP_KEYS = tuple(json.dumps(k) + ": " for k in STEP_FIELDS)


def _step_text(row: tuple[Any, ...]) -> str:
    """One step as :func:`_nested` writes its dict two levels deep (the same text, tests/test_training_report.py),
    without json's pure-Python indenting encoder: a 10^6-step report spent ~40 s there."""
    return ("{\n      " + ",\n      ".join(key + _scalar(v) for key, v in zip(_STEP_KEYS, row, strict=True))
            + "\n    }")


def _nested(value: Any, level: int) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` renders it ``level`` levels deep in a larger document."""
    return json.dumps(value, indent=2, allow_nan=False).replace("\n", "\n" + "  " * level)


def training_report_chunks(m: TrainingRunMetrics, name: str = "", notes: list[str] | None = None,
                           cap: int | None = None) -> Iterator[str] | None:
    """The run's training_report.json piece by piece (the text :func:`training_report_text` joins; a 10^6-iteration
    run's ~200 MB is never held, nor its steps), or None with one log line saying why there is none. A note for the
    reader (the aggregation of a run past ``stats.SAMPLE_CAP`` steps is partly sampled) is appended to ``notes`` and
    logged when the last piece has been produced."""
    series = _memory_series(m)
    why = None if series else NO_MEMORY
    if why is None and next(_steps(m, series), None) is None:
        why = NO_STEPS
    config = None
    if why is None:
        try:
            config = training_config(m.config)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"mbridge_config.json lacks what CloudAI's TrainingConfig needs ({exc!r})"
    if why is not None or config is None:
        logging.info("%s: no %s in %s: %s", name or m.run_dir.name, REPORT_FILE, m.run_dir, why)
        return None
    return _chunks(m, series, config, name, notes, cap)


def _chunks(m: TrainingRunMetrics, series: list[MemoryReport], config: TrainingConfig, name: str,
            notes: list[str] | None, cap: int | None) -> Iterator[str]:
    yield '{\n  "config": ' + _nested(asdict(config), 1) + ',\n  "steps": [\n'
    agg = _Aggregation(config.exclude_start_steps, cap)
    batch: list[str] = []
    separator = "    "  # before the first step; ",\n    " before every other
    for row in _rows(m, series):
        batch.append(separator + _step_text(row))
        separator = ",\n    "
        agg.add(row)
        if len(batch) >= STEP_BATCH:
            yield "".join(batch)
            batch = []
    yield "".join(batch)
    aggregation = agg.result()
    yield '\n  ],\n  "aggregation": ' + _nested(None if aggregation is None else asdict(aggregation), 1) + "\n}\n"
    if agg.note is not None:
        logging.info("%s: %s", name or m.run_dir.name, agg.note)
        if notes is not None:
            notes.append(agg.note)


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

    chunks = training_report_chunks(m)
    return None if chunks is None else write_atomic(Path(run_dir) / REPORT_FILE,
                                                    "".join(redact_report(c) for c in chunks))
