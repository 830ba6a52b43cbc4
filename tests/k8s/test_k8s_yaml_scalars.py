"""Issue 32: every value reaches the manifests as what objects.json says, read by YAML 1.1 readers.

kubectl reads a manifest with go-yaml v2, whose YAML 1.1 typing turns a plain ``y``, ``N``, ``on``, ``~``, ``0777``,
``1_000``, ``1e3``, ``.inf`` or ``2001-12-14`` into a boolean, null, a number or a timestamp. No API server and no
kubectl run here: each manifest is read back by yaml11.load_go_yaml_v2 (a port of go-yaml v2's resolve.go on PyYAML's
parser) and by PyYAML's own YAML 1.1 reader (which also types base 60, ``1:20``), and must equal the objects.json beside
it. The values come in through every field a user sets: environment values and names, namespace, node selector,
tolerations, PVC, Secret and service account names, scheduler and priority class, the test's name (a label).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_cases import EKS, k8s_strategy, load_test, system_toml
from k8s_checks import all_errors
from yaml11 import go_yaml_v2_resolve, load_go_yaml_v2

from cloudai_mbridge.launch.kubernetes import PREFIX
from cloudai_mbridge.systems.kubernetes.strategy import to_yaml

# Every class of plain scalar a YAML 1.1 (or 1.2) reader types as something else than a string.
TYPED = [
    *("y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO", "yEs"),
    *("true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"),
    *("~", "null", "Null", "NULL", ""),
    *("1", "-1", "+1", "0777", "0o17", "0x1F", "0b101", "-0b11", "1_000", "1e3", "1E-3", "1.", ".5", "09"),
    *(".inf", ".Inf", "-.INF", "+.inf", ".nan", ".NaN"),
    *("9223372036854775808", "18446744073709551616", "1:20", "190:20:30.15"),
    *("2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "2002-1-2"),
    *("<<", "="),
]
# Syntax a plain scalar cannot hold, and characters a YAML reader rewrites.
SYNTAX = [
    *("- x", "? x", "x: y", "#c", "a #c", "&a", "*a", "!t", "%YAML", "@x", "`x", "|", ">", "'", '"', "\\", "{a: 1}"),
    *("[1]", "---", "...", " lead", "trail ", "\t", "a\nb", "a\r\nb", "a\n", "\n", "x\n  y\n", "é", "😀", "\x85"),
    *("\u2028", "\ufeff", "\x00", "\x1b", "a\x85b\nc", "line \nnext", "$(NODE_RANK)", "$$"),
]


def test_the_reader_types_like_go_yaml_v2() -> None:
    """The port agrees with go-yaml v2's resolve.go on the cases its code names."""
    cases = {"y": True, "N": False, "on": True, "OFF": False, "~": None, "": None, "yEs": "yEs", "0777": 511}
    cases |= {"0x1F": 31, "1_000": 1000, "1e3": 1000.0, "09": 9.0, "1:20": "1:20", "-0b11": -3, ".5": 0.5}
    assert {s: go_yaml_v2_resolve(s) for s in cases} == cases
    assert go_yaml_v2_resolve("9223372036854775808") == 2**63  # ParseUint
    assert str(go_yaml_v2_resolve("2001-12-14")) == "2001-12-14 00:00:00"


@pytest.mark.parametrize("text", TYPED + SYNTAX, ids=[json.dumps(s, ensure_ascii=True) for s in TYPED + SYNTAX])
def test_a_string_reads_back_as_itself(text: str) -> None:
    """As a value, a key and a list item, in a manifest's nesting."""
    obj = {"metadata": {"labels": {text: text}}, "spec": {"env": [{"name": text, "value": text}], "args": [text]}}
    out = to_yaml(obj)
    assert load_go_yaml_v2(out) == obj, out
    assert yaml.safe_load(out) == obj, out


def _pyyaml_plain_is_a_string(text: str) -> bool:
    try:
        return isinstance(yaml.safe_load(f"k: {text}")["k"], str)
    except yaml.YAMLError:  # "<<" (merge) and "=" (value) have no constructor in a safe reader
        return False


def test_the_readers_would_type_these_unquoted() -> None:
    """The table holds the class: written plain, each TYPED value is typed by one reader or the other."""
    typed = [s for s in TYPED if not isinstance(go_yaml_v2_resolve(s), str) or not _pyyaml_plain_is_a_string(s)]
    assert typed == [s for s in TYPED if s != "yEs"]  # yEs: in no reader's list, kept as a control


def test_non_strings_keep_their_type() -> None:
    obj = {"a": 1, "b": True, "c": None, "d": 0, "e": 2**63 - 1, "f": [False, -(2**63)]}
    out = to_yaml(obj)
    assert load_go_yaml_v2(out) == obj and yaml.safe_load(out) == obj
    assert "'" not in out and '"' not in out


def test_code_stays_a_readable_block() -> None:
    code = 'import os\n\nprint("x: y")\n'
    out = to_yaml({"data": {"train.config.py": code}})
    assert "train.config.py: |\n    import os\n" in out


def _system(tmp: Path, kind: str) -> Path:
    # the toml package mangles backslashes and control characters (tab and newline aside): test_a_string_reads_back
    # has those
    printable = [s for s in SYNTAX if not re.search("[\\\\\x00-\x08\x0b-\x1f\x7f-\x9f]", s)]
    env = {f"V_{i}": value for i, value in enumerate(TYPED + printable)}
    env |= {"y": "N", "N": "y", "ON": "1e3"}  # environment variable names that look typed
    env |= {
        f"{PREFIX}KIND": kind,
        f"{PREFIX}NODE_SELECTOR": json.dumps({"y": "N", "on": "1_000", "n": "2001-12-14", "true": "0x1F", "no": "Off"}),
        f"{PREFIX}TOLERATIONS": json.dumps(
            [
                {"key": "y", "operator": "Equal", "value": "N", "effect": "NoSchedule"},
                {"key": "on", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
                {"operator": "Exists"},
            ]
        ),
        f"{PREFIX}RESULTS_PVC": "on",
        f"{PREFIX}MOUNTS": json.dumps({"/fsx": "0777", "/data": "2001-12-14"}),
        f"{PREFIX}CREDENTIALS": json.dumps({"HF_TOKEN": "y:n", "WANDB_API_KEY": "1e3:0777"}),
        f"{PREFIX}SERVICE_ACCOUNT": "no",
        f"{PREFIX}SCHEDULER_NAME": "true",
        f"{PREFIX}PRIORITY_CLASS": "null",
        f"{PREFIX}SHM_SIZE": "1000",
        f"{PREFIX}EXTRA_RESOURCES": json.dumps({"rdma/ib": 1}),
    }
    return system_toml(tmp, EKS, env, default_namespace="y")


def _values(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [v for k, val in obj.items() for v in (k, *_values(val))]
    if isinstance(obj, list):
        return [v for item in obj for v in _values(item)]
    return [obj]


@pytest.mark.parametrize("kind", ["job", "pytorchjob"])
def test_every_manifest_reads_back_as_objects_json(kind: str, tmp_path: Path) -> None:
    system = _system(tmp_path, kind)
    test = load_test("kimi_k2_sft")
    test["name"] = "1e3"  # the test's label value
    test["extra_env_vars"] = {"T_Y": "Y", "T_OCT": "0777", "T_TIME": "2001-12-14"}
    out = tmp_path / "out"
    objects = k8s_strategy(system, test, 32, out, {"data": "/fsx/y", "checkpoint_dir": "/fsx/n"}).gen_objects()
    assert all_errors(objects) == []
    meant = json.loads((out / "k8s" / "objects.json").read_text())["items"]
    assert meant == objects
    for expected in ("y", "N", "1e3", "0777", "2001-12-14", "on", "no", "null", "true", "1_000", "~", ".inf", "1:20"):
        assert expected in _values(meant), f"{expected!r} should reach the objects: the test would prove nothing"
    manifests = sorted((out / "k8s").glob("*.yaml"))
    assert len(manifests) == len(meant)
    for path in manifests:
        text = path.read_text()
        index = int(path.name[:2])
        assert load_go_yaml_v2(text) == meant[index], f"{path.name}: kubectl (go-yaml v2) reads other values"
        assert yaml.safe_load(text) == meant[index], f"{path.name}: a YAML 1.1 reader reads other values"
