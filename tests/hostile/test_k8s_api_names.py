"""Issue 46 (5): every name and key that reaches a Kubernetes manifest follows the API server's rules
(launch/kubernetes/apirules.py, each rule with its upstream source line). A Secret key the API server refuses
("..", "..x", ".", "a/b", 254 characters) is refused where the system file is read, naming the setting and the fix;
whatever slips past the settings is refused by the last gate over the rendered objects, naming the object and field.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cloudai_mbridge.launch.kubernetes import PREFIX, K8sConfigError, K8sSettings, parse_settings, render_objects
from cloudai_mbridge.launch.kubernetes.apirules import RULES, manifest_problems, problems_of
from cloudai_mbridge.launch.kubernetes.knobs import Credential

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))
from test_k8s_render import spec

# Upstream's own examples (apimachinery validation_test.go / content kube_test.go), good then bad, per rule.
VECTORS = {
    "config-key": (["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "A", "AB", ".a", "_a", "a.b", "a_b", "-a",
                    "a-", ".dotfile", "Key_Name", "x" * 253],
                   ["", ".", "..", "..a", "a/b", "a b", "a:b", "x" * 254, "ä", "a\n"]),
    "env-name": (["A", "ABC", "AbC123", "_123", "A_1", "A-1", "A.1", "a.b", "-a", ".a", "_"],
                 ["", "1", "123", "a b", "A=B", ".", "..", "..a", "ä", "A\n"]),
    "dns1123-label": (["a", "ab", "a-1", "0", "a" * 63], ["", "A", "a.b", "-a", "a-", "a_b", "a" * 64, "a\n"]),
    "dns1123-subdomain": (["a", "a.b", "a-1.b-2", "1.2", "a" * 253], ["", "A", ".a", "a.", "a..b", "a_b", "a" * 254]),
    "dns1035-label": (["a", "a-1", "a" * 63], ["", "1a", "a.b", "A", "a-", "a" * 64]),
    "label-key": (["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
                   "example.com/MyName", "a" * 63, "k.io/" + "a" * 63],
                  ["", "/simple", "simple/", "a/b/c", "nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun",
                   "\\backslashes\\are\\bad", "-starts-with-dash", "ends-with-dash-", ".starts.with.dot",
                   "a" * 64, "UPPER.example.com/x", "a" * 254 + "/b"]),
    "label-value": (["", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63],
                    ["nospecialchars%^=@", "Tama-nui-te-rā", "-dash", "dash-", "a" * 64, "a b"]),
    "port-name": (["http", "p", "rendezvous", "pytorchjob-port", "a1", "1a"],
                  ["", "1", "-a", "a-", "a--b", "A", "a_b", "x" * 16]),
}


@pytest.mark.parametrize("rule", sorted(VECTORS))
def test_each_rule_agrees_with_upstreams_examples(rule: str) -> None:
    good, bad = VECTORS[rule]
    assert [v for v in good if problems_of(rule, v)] == []
    assert [v for v in bad if not problems_of(rule, v)] == []


def test_every_rule_names_its_source_and_a_fix() -> None:
    for name, rule in RULES.items():
        assert rule.source.split()[0] in ("AM", "CT", "OM", "GN", "CORE", "KF"), name
        assert any(c.isdigit() for c in rule.source), f"{name}: no source line"
        assert rule.fix and rule.what


@pytest.mark.parametrize("key", [".", "..", "..x", "a/b", "k" * 254, "a b", "ключ"])
def test_a_secret_key_the_api_server_refuses_is_refused_with_the_setting_named(key: str) -> None:
    with pytest.raises(K8sConfigError) as e:
        parse_settings({f"{PREFIX}CREDENTIALS": json.dumps({"HF_TOKEN": f"hf-token:{key}"})})
    text = str(e.value)
    assert f"{PREFIX}CREDENTIALS['HF_TOKEN']" in text and "not a valid Secret key" in text
    assert "Fix: " in text and "\n" not in text
    assert key not in text or len(key) < 3, "the credentials value is not echoed"


@pytest.mark.parametrize("key", ["token", "hf.token", "HF_TOKEN", "a-b_c.d", "k" * 253, ".hidden"])
def test_valid_secret_keys_still_pass(key: str) -> None:
    settings, _ = parse_settings({f"{PREFIX}CREDENTIALS": json.dumps({"HF_TOKEN": f"hf-token:{key}"})})
    objects = render_objects(spec(settings=settings))
    assert manifest_problems(objects) == []


@pytest.mark.parametrize(
    ("knob", "value", "words"),
    [
        ("NODE_SELECTOR", '{"/instance-type": "x"}', "prefix part must be non-empty"),
        ("NODE_SELECTOR", '{"a/b/c": "x"}', "at most one '/'"),
        ("NODE_SELECTOR", '{"k": "' + "v" * 64 + '"}', "no more than 63"),
        ("TOLERATIONS", '[{"key": "/gpu", "operator": "Exists"}]', "taint key"),
        ("RESULTS_PVC", "x" * 254, "no more than 253"),
        ("SERVICE_ACCOUNT", "Bad_Name", "a Kubernetes object name"),
    ],
)
def test_names_in_other_settings_follow_the_same_rules(knob: str, value: str, words: str) -> None:
    with pytest.raises(K8sConfigError) as e:
        parse_settings({PREFIX + knob: value})
    assert PREFIX + knob in str(e.value) and words in str(e.value) and "Fix: " in str(e.value)


def test_the_last_gate_refuses_what_slipped_past_the_settings() -> None:
    """Settings built in code (no parse): the rendered manifest is still checked, naming object and field."""
    bad = K8sSettings(credentials=(Credential("HF_TOKEN", "hf-token", ".."),))
    with pytest.raises(K8sConfigError) as e:
        render_objects(spec(settings=bad))
    text = str(e.value)
    assert "valueFrom.secretKeyRef.key" in text and "'..'" in text and "IsConfigMapKey" in text, text
    bad = K8sSettings(node_selector={"/x": "y"}, priority_class="Not.Valid", master_port=70000)
    with pytest.raises(K8sConfigError) as e:
        render_objects(spec(settings=bad))
    assert "more)" in str(e.value), "every problem is counted"
    found = {p.where.split(": ", 1)[1] for p in manifest_problems(_unchecked(bad))}
    assert {"spec.template.spec.nodeSelector['/x']", "spec.template.spec.priorityClassName",
            "spec.ports[0].port"} <= found, found


def test_an_indexed_jobs_last_pod_hostname_fits_a_dns_label() -> None:
    objects = _unchecked(K8sSettings())
    job = objects[-1]
    job["metadata"]["name"] = "j" * 60
    job["spec"]["completions"] = job["spec"]["parallelism"] = 1000
    job["spec"]["template"]["spec"]["subdomain"] = "j" * 60
    wheres = [p.where for p in manifest_problems([job])]
    assert any("hostname of the last pod" in w for w in wheres), wheres


def test_annotations_over_256_kib_are_refused() -> None:
    objects = _unchecked(K8sSettings())
    objects[0]["metadata"]["annotations"] = {"a": "x" * (256 * 1024)}
    assert [p.rule for p in manifest_problems(objects[:1])] == ["annotations-size"]
    objects[0]["metadata"]["annotations"] = {"a": "x" * (256 * 1024 - 1)}
    assert manifest_problems(objects[:1]) == []


def test_pytorchjob_and_job_manifests_of_valid_settings_pass() -> None:
    for kind in ("job", "pytorchjob"):
        assert manifest_problems(render_objects(spec(settings=K8sSettings(kind=kind)))) == []


def _unchecked(settings: K8sSettings) -> list[dict]:
    """The objects as rendered before the last gate, to feed manifest_problems directly."""
    from unittest import mock

    with mock.patch("cloudai_mbridge.launch.kubernetes.objects.check_manifest"):
        return render_objects(spec(settings=settings))


def test_a_namespace_with_a_trailing_line_break_is_refused_where_the_system_file_is_read(tmp_path: Path) -> None:
    """The file check's own pattern ended in '$', which also matches before a final newline."""
    from helpers import CONF

    from cloudai_mbridge.cli.config_files import system_file_problems

    text = (CONF / "system" / "k8s_generic.toml").read_text()
    system = tmp_path / "system.toml"
    system.write_text(text.replace('default_namespace = "default"', 'default_namespace = "mbridge\\n"'))
    (problem,) = system_file_problems(system)
    assert "default_namespace = 'mbridge\\n' is not a Kubernetes namespace name" in problem and "Fix: " in problem
    system.write_text(text)
    assert system_file_problems(system) == []
