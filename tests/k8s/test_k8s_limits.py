"""Issue 32: values beyond what the API server (or the container's execve) takes are refused before anything is written.

No API server runs here: the limits are those of the Kubernetes sources (core/validation ValidateTolerations,
IsEnvVarName, batch validation's maxParallelismForIndexedJob, the int64 API types), etcd's default --max-request-bytes
and Linux's MAX_ARG_STRLEN; each refusal is one line that names the field, shows the value (cut when long) and the fix.
"""

from __future__ import annotations

import json

import pytest
from k8s_checks import all_errors
from test_k8s_render import spec

from cloudai_mbridge.launch.kubernetes import PREFIX, K8sConfigError, K8sSettings, parse_settings, render_objects
from cloudai_mbridge.launch.kubernetes.validation import (
    INT64_MAX,
    MAX_ARG_STRLEN,
    OBJECT_BUDGET,
    time_limit_seconds,
)


def _one_line(e: K8sConfigError) -> str:
    text = str(e)
    assert "\n" not in text and len(text) < 600, text
    assert "Fix: " in text
    return text


def test_an_env_string_execve_would_refuse_is_refused() -> None:
    fits = "x" * (MAX_ARG_STRLEN - len("A=") - 1)
    assert all_errors(render_objects(spec(env={"A": fits}))) == []
    for size in (len(fits) + 1, 2 << 20):
        with pytest.raises(K8sConfigError) as e:
            render_objects(spec(env={"A": "x" * size}, env_origin={"A": "global_env_vars.A of the system file (s)"}))
        text = _one_line(e.value)
        assert "global_env_vars.A of the system file (s)" in text and f"({size} bytes)" in text
        assert "E2BIG" in text


def test_an_object_over_what_etcd_stores_is_refused() -> None:
    """Each value fits execve, but together they are over the object budget (a PyTorchJob repeats them per replica)."""
    value = "x" * (MAX_ARG_STRLEN // 2)
    env = {f"V{i}": value for i in range(OBJECT_BUDGET // len(value) + 1)}
    for kind in ("job", "pytorchjob"):
        with pytest.raises(K8sConfigError) as e:
            render_objects(spec(env=env, settings=K8sSettings(kind=kind)))
        text = _one_line(e.value)
        assert "etcd" in text and "shorten the environment values" in text
    few = {k: env[k] for k in list(env)[:3]}
    assert all_errors(render_objects(spec(env=few))) == []


@pytest.mark.parametrize("name", [".", "..", "..x"])
def test_env_names_kubernetes_refuses(name: str) -> None:
    with pytest.raises(K8sConfigError, match="not a valid environment variable name"):
        render_objects(spec(env={name: "1"}))
    with pytest.raises(K8sConfigError, match="not an environment variable name"):
        parse_settings({f"{PREFIX}CREDENTIALS": json.dumps({name: "s:k"})})


TOLERATIONS = [
    ({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63}, "int64"),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -(2**63) - 1}, "int64"),
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}, "NoExecute"),
    ({"key": "k", "operator": "Exists", "tolerationSeconds": 30}, "NoExecute"),
    ({"key": "bad key!", "operator": "Exists"}, "taint key"),
    ({"key": "x" * 64, "operator": "Exists"}, "taint key"),
    ({"key": "k", "value": "v" * 64}, "taint value"),
    ({"key": "k", "operator": "Equal", "value": "a b"}, "taint value"),
    ({"operator": "Equal", "value": "v"}, "must be Exists when key is empty"),
    ({"value": ""}, "must be Exists when key is empty"),
]


@pytest.mark.parametrize(("toleration", "problem"), TOLERATIONS)
def test_tolerations_the_api_server_refuses(toleration: dict, problem: str) -> None:
    with pytest.raises(K8sConfigError) as e:
        parse_settings({f"{PREFIX}TOLERATIONS": json.dumps([toleration])})
    assert problem in _one_line(e.value)


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": INT64_MAX},
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -(2**63)},
        {"key": "example.com/k", "value": "v" * 63, "effect": "NoSchedule"},
        {"operator": "Exists"},
    ],
)
def test_tolerations_at_the_limits_are_taken(toleration: dict) -> None:
    settings, _ = parse_settings({f"{PREFIX}TOLERATIONS": json.dumps([toleration])})
    assert all_errors(render_objects(spec(settings=settings))) == []


def test_a_time_limit_beyond_int64_is_refused() -> None:
    assert time_limit_seconds(f"{INT64_MAX // 60}") == INT64_MAX // 60 * 60
    with pytest.raises(K8sConfigError, match="int64") as e:
        time_limit_seconds("9" * 30)
    _one_line(e.value)


def test_more_nodes_than_an_indexed_job_runs_are_refused() -> None:
    with pytest.raises(K8sConfigError, match="100000 pods"):
        render_objects(spec(num_nodes=100_001))
