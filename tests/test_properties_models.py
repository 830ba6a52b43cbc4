"""Issue 14: property-based tests (hypothesis) of the TOML-facing models.

tests/test_strict_types.py holds a hand-written table of bad values; here hypothesis draws them. What a user would
notice, for every int field of MBridgeTrainingCmdArgs / MBridgeRefitCmdArgs (nested ones included):

- a value of a wrong type (str, float, bool, list, table, None) is a ValidationError located at that field, never
  coerced (an empty sweep is valid here: preflight refuses it for the whole test, naming the test);
- an int outside the field's bounds is refused: counts and sizes fit int32 (workloads/fields.py: Megatron and torch
  carry them in int32 in places), a seed int64 (torch.manual_seed), timeout_s a week; 10**30 or 10**400 never pass;
- an int inside the bounds comes back unchanged (a sweep list too);
- any unicode string in a string field is accepted unchanged or refused with a ValidationError located at the field
  (by the documented rule where the field has one), and Literal fields accept exactly their values; bool and float
  fields take no strings and no ints for bools, and floats are finite;
- a validated model dumps (as Python, as JSON and as TOML, which is how CloudAI writes test-run.toml) and validates
  back to an equal model;
- the test definitions around them: a secret-named extra_env_vars value never survives validation, and a valid point
  plans, checks and writes its payload config without raising, carrying the values it was given.
"""

from __future__ import annotations

import json
import typing
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import pytest
import toml
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_settings import SETTINGS
from pydantic import BaseModel, ValidationError

from cloudai_mbridge.payload.refit.config import resolve_sides
from cloudai_mbridge.workloads.refit.test_definition import (
    MBridgeRefitCmdArgs,
    MBridgeRefitTestDefinition,
    RefitSide,
)
from cloudai_mbridge.workloads.training.test_definition import (
    CUDA_GRAPH_SCOPES,
    OFFLOAD_MODULES,
    RECOMPUTE_MODULES,
    EchoArgs,
    GoldenThresholdArgs,
    MBridgeTrainingCmdArgs,
    MBridgeTrainingTestDefinition,
)

FEW = settings(SETTINGS, max_examples=40)

INT64_MAX = 2**63 - 1  # a seed: torch.manual_seed takes int64
INT32_MAX = 2**31 - 1  # counts and sizes (workloads/fields.py PosInt / NonNegInt)
PARALLEL_MAX = 65536  # parallel sizes (workloads/fields.py Parallel)
LAYERS_MAX = 1024  # mtp_num_layers, refit num_layers (workloads/fields.py LayerCount, ModelLayers)
# physical ranges of counts (workloads/fields.py, issue 46)
STEPS_MAX, REPEATS_MAX, SEQ_MAX, BATCH_MAX, GPUS_MAX, MIB_MAX = 10_000_000, 100_000, 1 << 24, 1 << 22, 1 << 20, 1 << 20
TRAIN = {"model": "kimi_k2_proxy", "gpu": "h100"}
REFIT = {"model": "kimi_k2_proxy", "src": {"tp": 1}, "dst": {"tp": 1}}
BASES = {MBridgeTrainingCmdArgs: TRAIN, MBridgeRefitCmdArgs: REFIT}


@dataclass(frozen=True)
class IntField:
    model: type[BaseModel]
    path: tuple[str, ...]
    lo: int
    hi: int
    sweep: bool = False  # typed T | list[T]: a list is a sweep of valid values
    optional: bool = False  # None is a valid value

    def __str__(self) -> str:
        return f"{self.model.__name__}.{'.'.join(self.path)}"


T, R = MBridgeTrainingCmdArgs, MBridgeRefitCmdArgs
INT_FIELDS = [
    *(IntField(T, (k,), 1, PARALLEL_MAX, sweep=True) for k in ("tp", "pp", "cp", "ep", "etp")),
    *(IntField(T, (k,), 1, BATCH_MAX, sweep=True) for k in ("mbs", "gbs")),
    IntField(T, ("seq_length",), 1, SEQ_MAX, sweep=True),
    IntField(T, ("vp",), 1, PARALLEL_MAX, sweep=True, optional=True),
    IntField(T, ("train_iters",), 1, STEPS_MAX),
    IntField(T, ("log_interval",), 1, STEPS_MAX),
    IntField(T, ("num_distributed_optimizer_instances",), 1, GPUS_MAX),
    IntField(T, ("seed",), 0, INT64_MAX),
    IntField(T, ("mtp_num_layers",), 0, LAYERS_MAX, optional=True),
    IntField(T, ("echo", "num_echo_experts"), 1, INT32_MAX, sweep=True),
    *(IntField(T, (k,), 1, LAYERS_MAX, sweep=True, optional=True)
      for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")),
    IntField(T, ("cuda_graph_warmup_steps",), 0, 10_000, optional=True),
    IntField(T, ("fine_grained_offloading_max_inflight_offloads",), 0, 1024, optional=True),
    IntField(T, ("hang_timeout_s",), 0, 7 * 24 * 3600, optional=True),
    IntField(R, ("num_layers",), 1, LAYERS_MAX, optional=True),
    IntField(R, ("seq_length",), 1, SEQ_MAX, optional=True),  # unset: 4096, or the model's maximum
    IntField(R, ("coalesce_mib",), 0, MIB_MAX, sweep=True),
    IntField(R, ("coalesce_edge_mib",), 0, MIB_MAX, sweep=True),
    IntField(R, ("warmup",), 1, REPEATS_MAX),
    IntField(R, ("iterations",), 1, REPEATS_MAX),
    IntField(R, ("timeout_s",), 1, 7 * 24 * 3600),
    IntField(R, ("seed",), 0, INT64_MAX),
    # unset: upstream's value (the source's 1, etp = tp; the destination inherits the source's: test_refit_defaults)
    *(IntField(R, (side, k), 1, PARALLEL_MAX, sweep=True, optional=True) for side in ("src", "dst")
      for k in ("tp", "pp", "ep", "etp")),
    *(IntField(R, (side, "world"), 1, GPUS_MAX, optional=True) for side in ("src", "dst")),
]


def test_the_table_covers_every_int_field() -> None:
    """A new int field must be added to INT_FIELDS (else no property here checks it)."""

    def int_paths(model: type[BaseModel], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        found = set()
        for name, info in model.model_fields.items():
            args = _flat_args(info.annotation)
            nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            for sub in nested:
                if sub is not GoldenThresholdArgs:  # floats only, checked below
                    found |= int_paths(sub, (*prefix, name))
            if int in args:
                found.add((*prefix, name))
        return found

    for model in (T, R):
        assert int_paths(model, ()) == {f.path for f in INT_FIELDS if f.model is model}


def _flat_args(annotation: Any) -> list[Any]:
    """Every type an annotation can hold: unions, lists and Annotated unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flat_args(typing.get_args(annotation)[0])
    if origin is None:
        return [annotation]
    return [annotation, *(a for arg in typing.get_args(annotation) for a in _flat_args(arg))]


def with_value(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(base))
    obj = data
    for key in path[:-1]:
        obj = obj.setdefault(key, {"num_echo_experts": 1} if key == "echo" else {})
    obj[path[-1]] = value
    return data


def get_path(model: BaseModel, path: tuple[str, ...]) -> Any:
    obj: Any = model
    for key in path:
        obj = getattr(obj, key)
    return obj


def assert_refused_at(model: type[BaseModel], data: dict[str, Any], path: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    locs = [e["loc"] for e in info.value.errors()]
    assert locs, info.value
    assert all(tuple(loc[: len(path)]) == path for loc in locs), (path, locs)
    assert ".".join(path) in str(info.value)


# --- int fields ------------------------------------------------------------------------------------------------------
fields = st.sampled_from(INT_FIELDS)
not_int_scalars = st.one_of(
    st.text(max_size=12),
    st.integers(-(10**20), 10**20).map(str),  # "8"
    st.floats(allow_nan=True, allow_infinity=True),  # 8.0, nan, inf
    st.integers(-(2**53), 2**53).map(float),
    st.booleans(),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@st.composite
def wrong_type_for(draw: st.DrawFn, field: IntField) -> Any:
    good = st.integers(field.lo, field.hi)
    options = [not_int_scalars, st.lists(not_int_scalars, min_size=1, max_size=3)]
    if field.sweep:
        # a sweep with one bad element, a nested list
        options += [
            st.tuples(st.lists(good, max_size=3), not_int_scalars, st.lists(good, max_size=3)).map(
                lambda t: [*t[0], t[1], *t[2]]
            ),
            st.lists(good, min_size=1, max_size=2).map(lambda v: [v]),
        ]
    else:
        options.append(st.lists(good, max_size=3))  # a list where no sweep is allowed
    if not field.optional:
        options.append(st.none())
    return draw(st.one_of(options))


@SETTINGS
@given(st.data())
def test_a_wrong_type_for_an_int_field_is_refused_at_that_field(data: st.DataObject) -> None:
    field = data.draw(fields, label="field")
    value = data.draw(wrong_type_for(field), label="value")
    assert_refused_at(field.model, with_value(BASES[field.model], field.path, value), field.path)


@SETTINGS
@given(st.data())
def test_an_int_out_of_bounds_is_refused(data: st.DataObject) -> None:
    field = data.draw(fields, label="field")
    value = data.draw(
        st.one_of(
            st.integers(max_value=field.lo - 1),
            st.integers(min_value=field.hi + 1),
            st.sampled_from([field.lo - 1, field.hi + 1, -(2**63), 2**31, 2**63, 2**64, 10**30, 10**400]).filter(
                lambda v: not field.lo <= v <= field.hi
            ),
        ),
        label="value",
    )
    if field.sweep and data.draw(st.booleans(), label="in a sweep"):
        value = [field.lo, value]
    assert_refused_at(field.model, with_value(BASES[field.model], field.path, value), field.path)


@SETTINGS
@given(st.data())
def test_an_int_within_bounds_round_trips_unchanged(data: st.DataObject) -> None:
    field = data.draw(fields, label="field")
    good = st.one_of(st.integers(field.lo, field.hi), st.sampled_from([field.lo, field.hi]))
    value = data.draw(st.lists(good, min_size=1, max_size=4) if field.sweep and data.draw(st.booleans()) else good)
    model = field.model.model_validate(with_value(BASES[field.model], field.path, value))
    got = get_path(model, field.path)
    assert got == value
    for v in got if isinstance(got, list) else [got]:
        assert type(v) is int


# --- bool and float fields -------------------------------------------------------------------------------------------
BOOL_FIELDS = [
    (T, ("moe_a2a_overlap",)),
    (T, ("moe_shared_expert_overlap",)),
    (T, ("force_balanced_routing",)),
    (T, ("sequence_parallel",)),
    (T, ("convert_checkpoint",)),
    (T, ("echo", "device_initiated_grouped_gemm")),
    (T, ("echo", "recompute_expert_dispatch")),
    (R, ("verify",)),
]
FLOAT_FIELDS = [(T, ("golden_thresholds", name)) for name in GoldenThresholdArgs.model_fields] + [
    (T, ("echo", "received_token_capacity")), (T, ("moe_expert_rank_capacity_factor",)), (T, ("lr",))
]


@SETTINGS
@given(st.sampled_from(BOOL_FIELDS),
       st.one_of(st.integers(), st.floats(), st.sampled_from(["true", "false", "yes", "1", "0", "on", ""]),
                 st.text(max_size=6)))
def test_a_bool_field_takes_only_true_or_false(field: tuple[type[BaseModel], tuple[str, ...]], value: Any) -> None:
    model, path = field
    assert_refused_at(model, with_value(BASES[model], path, value), path)
    for ok in (True, False):
        assert get_path(model.model_validate(with_value(BASES[model], path, ok)), path) is ok


@SETTINGS
@given(st.sampled_from(FLOAT_FIELDS),
       st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True).map(str), st.text(max_size=6),
                 st.sampled_from([float("nan"), float("inf"), float("-inf")])))
def test_a_float_field_takes_no_string_bool_or_non_finite_value(
    field: tuple[type[BaseModel], tuple[str, ...]], value: Any
) -> None:
    model, path = field
    assert_refused_at(model, with_value(BASES[model], path, value), path)


@SETTINGS
@given(st.sampled_from(FLOAT_FIELDS), st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                                                st.integers(-(10**6), 10**6)))
def test_a_finite_float_field_value_is_kept_or_refused_by_its_bounds(
    field: tuple[type[BaseModel], tuple[str, ...]], value: float
) -> None:
    model, path = field
    data = with_value(BASES[model], path, value)
    try:
        validated = model.model_validate(data)
    except ValidationError:
        assert_refused_at(model, data, path)
        return
    got = get_path(validated, path)
    assert got == value and isinstance(got, float)


# --- string fields ---------------------------------------------------------------------------------------------------
def literal_values(model: type[BaseModel], name: str) -> set[str]:
    return {
        v for a in _flat_args(model.model_fields[name].annotation) if typing.get_origin(a) is typing.Literal
        for v in typing.get_args(a)
    }


LITERAL_FIELDS = [
    (model, name)
    for model in (T, R)
    for name in model.model_fields
    if literal_values(model, name)
]


def _csv_ok(value: str, allowed: tuple[str, ...]) -> bool:
    return all(s.strip() in allowed for s in value.split(",") if s.strip())


def _absolute(value: str) -> bool:  # workloads/fields.py: no control or format (Cf) character in a cluster path
    return not any(ord(c) < 32 or ord(c) == 127 or unicodedata.category(c) == "Cf" for c in value) \
        and PurePosixPath(value).is_absolute()


# field -> the documented rule for which strings it accepts (None: kept unchanged or refused at the field, the rule is
# owned elsewhere: workloads/fields.py for images and hub ids, rules/ for layouts)
STRING_RULES: dict[tuple[type[BaseModel], str], typing.Callable[[str], bool] | None] = {
    (T, "recompute_modules"): lambda v: _csv_ok(v, RECOMPUTE_MODULES),
    (T, "cuda_graph_scope"): lambda v: _csv_ok(v, CUDA_GRAPH_SCOPES),
    (T, "offload_modules"): lambda v: _csv_ok(v, OFFLOAD_MODULES),
    (T, "data"): lambda v: v == "mock" or _absolute(v),
    (T, "checkpoint_dir"): _absolute,
    (T, "hf_config_dir"): _absolute,
    (T, "golden_values"): lambda v: bool(v.strip()) and "\n" not in v,
    (T, "hf_model_id"): None,
    (T, "container_image"): None,
    (T, "pipeline_layout"): None,
    (R, "container_image"): None,
    (R, "python"): None,
    # rule ids, checked against the workload's rules at the field (workloads/base.py expected_rejections)
    (T, "expected_rejections"): None,
    (R, "expected_rejections"): None,
}


SWEEP_STRINGS = {"recompute_modules", "cuda_graph_scope", "pipeline_layout", "offload_modules"}  # str | list[str]


def test_the_tables_cover_every_string_field() -> None:
    for model in (T, R):
        strings = {name for name, info in model.model_fields.items() if str in _flat_args(info.annotation)}
        assert strings == {name for m, name in STRING_RULES if m is model}
        literals = {name for m, name in LITERAL_FIELDS if m is model}
        assert {"model", "dispatcher"} <= literals or {"model", "mode"} <= literals


def _validate_string(model: type[BaseModel], name: str, value: Any) -> BaseModel | None:
    """The model, or None for a ValidationError located at the field; any other exception fails the test."""
    data = with_value(BASES[model], (name,), value)
    try:
        return model.model_validate(data)
    except ValidationError:
        assert_refused_at(model, data, (name,))
        return None


unicode_text = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=40),  # every code point TOML (UTF-8) can carry
    st.text(st.sampled_from(["\x00", "\n", "\r", "\t", " ", "/", ",", "\u2028", "\ufeff", "\U0001f600", "é"]),
            max_size=8),
)


@SETTINGS
@given(st.sampled_from(sorted(STRING_RULES, key=lambda k: (k[0].__name__, k[1]))), st.data())
def test_any_unicode_string_is_kept_unchanged_or_refused_by_the_documented_rule(
    field: tuple[type[BaseModel], str], data: st.DataObject
) -> None:
    model, name = field
    accepts = STRING_RULES[field]
    pieces = {(T, "recompute_modules"): RECOMPUTE_MODULES, (T, "cuda_graph_scope"): CUDA_GRAPH_SCOPES,
              (T, "offload_modules"): OFFLOAD_MODULES}.get(field)
    strategies = [unicode_text, st.just("/").flatmap(lambda s: unicode_text.map(lambda t: s + t))]
    if pieces:
        strategies.append(st.lists(st.sampled_from([*pieces, " ", ""]), max_size=4).map(",".join))
    value = data.draw(st.one_of(strategies), label="value")
    as_list = name in SWEEP_STRINGS and data.draw(st.booleans(), label="as a sweep")
    validated = _validate_string(model, name, [value] if as_list else value)
    if accepts is not None:
        assert (validated is not None) == accepts(value)
    if validated is not None:
        assert getattr(validated, name) == ([value] if as_list else value)


@SETTINGS
@given(st.sampled_from(LITERAL_FIELDS), st.data())
def test_a_literal_field_accepts_exactly_its_values(field: tuple[type[BaseModel], str], data: st.DataObject) -> None:
    model, name = field
    allowed = literal_values(model, name)
    value = data.draw(st.one_of(st.sampled_from(sorted(allowed)), unicode_text,
                                st.sampled_from(sorted(allowed)).map(str.upper),
                                st.sampled_from(sorted(allowed)).map(lambda s: f" {s}")), label="value")
    validated = _validate_string(model, name, value)
    assert (validated is not None) == (value in allowed)
    if validated is not None:
        assert getattr(validated, name) == value


# --- whole models: dump and validate back ----------------------------------------------------------------------------
def _one_or_sweep(strategy: st.SearchStrategy[Any], sweep: bool = True) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, st.lists(strategy, min_size=1, max_size=3)) if sweep else strategy


pos = st.one_of(st.integers(1, 64), st.integers(1, INT32_MAX))
par = st.one_of(st.integers(1, 64), st.integers(1, PARALLEL_MAX))


def upto(hi: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 64), st.integers(1, hi))
# No control characters in round-tripped strings: the toml package (CloudAI's writer of test-run.toml) raises
# IndexError in toml.dumps on C0 controls (and writes "ax1fb" for "a\x1fb"), whatever the model accepts.
printable = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Cf"))  # Cf: refused like control chars
paths = st.text(printable, max_size=20).map(lambda s: "/" + s)
words = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
images = st.tuples(words, words, words).map(lambda t: f"nvcr.io/{t[0]}/{t[1]}:{t[2]}")
hub_ids = st.one_of(st.tuples(words, words).map("/".join), paths)
finite = st.floats(allow_nan=False, allow_infinity=False)


def _literal(model: type[BaseModel], name: str) -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(literal_values(model, name)))


@st.composite
def training_args(draw: st.DrawFn) -> dict[str, Any]:
    args: dict[str, Any] = {"model": draw(_one_or_sweep(_literal(T, "model"))), "gpu": draw(_literal(T, "gpu"))}
    optional = {
        **{k: _one_or_sweep(par) for k in ("tp", "pp", "vp", "cp", "ep", "etp")},
        **{k: _one_or_sweep(upto(BATCH_MAX)) for k in ("mbs", "gbs")},
        "seq_length": _one_or_sweep(upto(SEQ_MAX)),
        **{k: upto(STEPS_MAX) for k in ("train_iters", "log_interval")},
        "seed": st.integers(0, INT64_MAX),
        "mtp_num_layers": st.integers(0, 8),
        "moe_expert_rank_capacity_factor": _one_or_sweep(st.floats(min_value=1e-6, max_value=1024)),
        **{k: _one_or_sweep(_literal(T, k)) for k in ("task", "dispatcher", "deepep_impl", "recompute", "precision",
                                                        "cuda_graph_impl", "bridge_version")},
        **{k: _literal(T, k) for k in ("network", "optimizer", "engine")},
        **{k: _one_or_sweep(st.booleans()) for k in ("moe_a2a_overlap", "moe_shared_expert_overlap",
                                                     "force_balanced_routing", "sequence_parallel")},
        "convert_checkpoint": st.booleans(),
        "recompute_modules": _one_or_sweep(st.lists(st.sampled_from(RECOMPUTE_MODULES), max_size=3).map(",".join)),
        "cuda_graph_scope": _one_or_sweep(st.lists(st.sampled_from(CUDA_GRAPH_SCOPES), max_size=3).map(",".join)),
        "pipeline_layout": _one_or_sweep(st.text(printable, max_size=12)),
        "data": st.one_of(st.just("mock"), paths),
        **{k: paths for k in ("checkpoint_dir", "hf_config_dir")},
        "hf_model_id": hub_ids,
        "container_image": images,
        "golden_values": st.text(printable, min_size=1, max_size=20).filter(str.strip),
        "echo": st.fixed_dictionaries(
            {"num_echo_experts": _one_or_sweep(pos)},
            optional={"received_token_capacity": _one_or_sweep(st.floats(min_value=1e-6, max_value=1e6)),
                      "device_initiated_grouped_gemm": _one_or_sweep(st.booleans()),
                      "recompute_expert_dispatch": _one_or_sweep(st.booleans())},
        ),
        "golden_thresholds": st.fixed_dictionaries(
            {}, optional={"correlation_threshold": st.floats(-1, 1), "timing_threshold": st.floats(0, 10),
                          "skip_first_percent_time": st.floats(0, 0.99), "high_loss_above": finite,
                          "outlier_threshold": st.floats(1e-3, 100)}),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=len(optional))):
        args[key] = draw(optional[key])
    return args


def refit_side(sweep: bool) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={**{k: _one_or_sweep(par, sweep) for k in ("tp", "pp", "ep", "etp")},
                                               "world": upto(GPUS_MAX)})


@st.composite
def refit_args(draw: st.DrawFn, sweep: bool = True) -> dict[str, Any]:
    args: dict[str, Any] = {"model": draw(_one_or_sweep(_literal(R, "model"), sweep)),
                            "src": draw(refit_side(sweep)), "dst": draw(refit_side(sweep))}
    optional = {
        "num_layers": upto(LAYERS_MAX),
        "seq_length": upto(SEQ_MAX),
        **{k: upto(REPEATS_MAX) for k in ("warmup", "iterations")},
        "coalesce_mib": _one_or_sweep(st.integers(0, MIB_MAX), sweep),
        "timeout_s": st.integers(1, 7 * 24 * 3600),
        "seed": st.integers(0, INT64_MAX),
        **{k: _one_or_sweep(_literal(R, k), sweep) for k in ("mode", "transport", "executor")},
        **{k: _literal(R, k) for k in ("device", "dtype")},
        "verify": st.booleans(),
        "container_image": images,
        "python": paths.filter(lambda s: " " not in s),  # workloads/fields.py check_python: no space
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=len(optional))):
        args[key] = draw(optional[key])
    return args


def _round_trips(model: type[BaseModel], args: dict[str, Any]) -> None:
    validated = model.model_validate(args)
    for key, value in args.items():  # nothing given was replaced
        got = getattr(validated, key)
        assert (got.model_dump(exclude_unset=True) if isinstance(got, BaseModel) else got) == value, key
    assert model.model_validate(validated.model_dump()) == validated
    assert model.model_validate(json.loads(validated.model_dump_json())) == validated
    # CloudAI writes the test definition as TOML (test-run.toml: toml.dump(model_dump())); toml drops None values.
    # Known, outside this plugin: toml 0.10.2 (CloudAI's writer) writes U+00A0 and the other non-ASCII spaces as
    # "\\xa0"-style text that reads back changed ('/\xa0' -> '/xa0'); such values are not checked here.
    dump = validated.model_dump()
    if not any(isinstance(v, str) and any(c != " " and unicodedata.category(c) in ("Zs", "Zl", "Zp") for c in v)
               for v in dump.values()):
        assert model.model_validate(toml.loads(toml.dumps(dump))) == validated


@SETTINGS
@given(training_args())
def test_a_valid_training_model_round_trips(args: dict[str, Any]) -> None:
    _round_trips(T, args)


@SETTINGS
@given(refit_args())
def test_a_valid_refit_model_round_trips(args: dict[str, Any]) -> None:
    _round_trips(R, args)


# --- the test definitions around them --------------------------------------------------------------------------------
# A variable name that ends in a credential word, alone or after "_": HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY
SECRET_WORDS = ("TOKEN", "SECRET", "SECRET_KEY", "PASSWORD", "PASSWD", "API_KEY", "ACCESS_KEY", "PRIVATE_KEY")
env_name = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789", min_size=1, max_size=10)
secret_value = st.text(st.characters(codec="utf-8"), min_size=12, max_size=30).map(lambda s: "s3cr3t-" + s)


@SETTINGS
@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["", "HF_", "WANDB_", "AWS_SECRET_", "DB_", "MY_APP_"]),
                  st.sampled_from(SECRET_WORDS), st.booleans()).map(lambda t: t[0] + (t[1].lower() if t[2] else t[1])),
        secret_value, min_size=1, max_size=3),
    st.dictionaries(env_name.filter(lambda k: not any(w in k for w in ("TOKEN", "SECRET", "PASS", "KEY"))),
                    st.text(st.characters(codec="utf-8"), max_size=20), max_size=3),
    st.sampled_from(["MBridgeTraining", "MBridgeRefit"]),
    st.text(max_size=20),
)
def test_a_secret_named_env_value_never_survives_validation(
    secrets: dict[str, str], others: dict[str, str], template: str, text: str
) -> None:
    cls = MBridgeTrainingTestDefinition if template == "MBridgeTraining" else MBridgeRefitTestDefinition
    data = {"name": text, "description": text, "test_template_name": template,
            "cmd_args": TRAIN if template == "MBridgeTraining" else REFIT,
            "extra_env_vars": {**others, **secrets}}
    tdef = cls.model_validate(data)
    dumped = tdef.model_dump_json()
    for key, value in secrets.items():
        assert tdef.extra_env_vars[key] != value and value not in dumped and json.dumps(value)[1:-1] not in dumped
    for key, value in others.items():
        assert tdef.extra_env_vars[key] == value
    assert tdef.name == text and tdef.description == text


@st.composite
def training_point(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """One unrolled training point of plausible sizes (each field a scalar) and its node count."""
    args: dict[str, Any] = {
        "model": draw(_literal(T, "model")),
        "gpu": draw(_literal(T, "gpu")),
        **{k: draw(st.sampled_from([1, 2, 4, 8])) for k in ("tp", "pp", "cp", "ep", "etp", "mbs")},
        "vp": draw(st.sampled_from([None, 1, 2, 4])),
        "gbs": draw(st.sampled_from([8, 64, 256, 1024, BATCH_MAX])),
        "seq_length": draw(st.sampled_from([1, 1024, 4096, 2**20])),
        "train_iters": draw(st.integers(1, STEPS_MAX)),
        "seed": draw(st.integers(0, INT64_MAX)),
        "mtp_num_layers": draw(st.sampled_from([None, 0, 1, 2])),
        **{k: draw(_literal(T, k)) for k in ("dispatcher", "recompute", "precision", "engine", "task",
                                              "optimizer")},
        "moe_a2a_overlap": draw(st.booleans()),
        "sequence_parallel": draw(st.booleans()),
        "moe_expert_rank_capacity_factor": draw(st.sampled_from([None, 1e-3, 1.5, 1024.0])),
    }
    return args, draw(st.sampled_from([1, 2, 4, 16]))


@FEW
@given(training_point())
def test_a_valid_training_point_is_checked_and_configured_without_raising(point: tuple[dict[str, Any], int]) -> None:
    from cloudai.core import TestRun

    args, nodes = point
    tdef = MBridgeTrainingTestDefinition.model_validate(
        {"name": "p", "description": "d", "test_template_name": "MBridgeTraining", "cmd_args": args})
    tr = TestRun(name="p", test=tdef, num_nodes=nodes, nodes=[], output_path="/nonexistent/out",
                 time_limit="01:00:00")
    violations = tdef.violations(tr, None)
    assert all(v.message for v in violations)
    note = tdef.describe(tr, None)
    assert note is None or note.startswith("memory estimate")
    config = tdef.payload_config(tr, None, "/nonexistent/out")
    # the payload gets the values the TOML gave, never a silently replaced one
    for key in ("tp", "pp", "cp", "ep", "etp", "mbs", "gbs", "seq_length", "train_iters", "seed", "dispatcher",
                "recompute", "precision", "task", "optimizer"):
        assert config[key] == args[key], key
    assert config.get("moe_expert_rank_capacity_factor") == args["moe_expert_rank_capacity_factor"]
    json.dumps(config, allow_nan=False)


@FEW
@given(refit_args(sweep=False))
def test_a_valid_refit_point_is_checked_without_raising(args: dict[str, Any]) -> None:
    from cloudai.core import TestRun

    tdef = MBridgeRefitTestDefinition.model_validate(
        {"name": "p", "description": "d", "test_template_name": "MBridgeRefit", "cmd_args": args})
    tr = TestRun(name="p", test=tdef, num_nodes=1, nodes=[], output_path="/nonexistent/out", time_limit="01:00:00")
    assert all(v.message for v in tdef.violations(tr, None))
    config = tdef.payload_config()
    for key in ("seed", "timeout_s", "warmup", "iterations", "verify"):
        assert config[key] == getattr(tdef.cmd_args, key)
    # unset sizes arrive filled as upstream fills them (payload/refit/config.py resolve_sides)
    src, dst = (RefitSide.model_validate(args[which]).model_dump() for which in ("src", "dst"))
    assert (config["src"], config["dst"]) == resolve_sides(src, dst)


def test_every_nested_model_forbids_unknown_keys() -> None:
    for model in (T, R, RefitSide, EchoArgs, GoldenThresholdArgs):
        assert model.model_config.get("extra") == "forbid", model
