"""Issue 46 (6): a node name Slurm cannot resolve never reaches ``#SBATCH --nodelist`` / ``--exclude``. Every node
list (a scenario's nodes and exclude_nodes, a system's [[partitions.groups]] nodes) is read as a Slurm hostlist that
CloudAI and sbatch both expand alike, and refused naming the file, the entry and the fix otherwise."""

from __future__ import annotations

import pytest

from cloudai_mbridge.launch.hostlist import MAX_NODES, hostlist_problem
from hostile.harness import Case, run_all

GOOD = ["node1", "gpu-a.b_c", "node[001-032]", "node[1,4-6]", "a1,a2", "a1, a2", "n[1-2],m[3-4]", "[1-4]",
        "p1:g1:4", "p1:g1:max_avail", f"n[1-{MAX_NODES}]", "  node1  "]
BAD = {
    "gpu@1": "'@'", "node 1": "' '", "nodé1": "'é'", "-node": "starts with '-'", "node1]": "one prefix[ranges]",
    "node[1-": "one prefix[ranges]", "node[1-2]x": "one prefix[ranges]", "r[1-2]n[1-4]": "one prefix[ranges]",
    "node[4-1]": "runs backwards", "node[a-b]": "not N or N-M", "node[]": "not N or N-M",
    "node[0-99999999999]": f"more than {MAX_NODES}", f"n[1-{MAX_NODES}],x": f"more than {MAX_NODES}",
    "p:g": "partition:group:count", "p:g:0": "count '0'", "p:g:lots": "count 'lots'", "p@:g:1": "partition 'p@'",
    "": "is empty", "a,,b": "is empty", "node\x1b[31m": "U+001B", "n/1": "'/'", "n=1": "'='",
}


@pytest.mark.parametrize("entry", GOOD)
def test_hostlists_slurm_and_cloudai_read_alike_pass(entry: str) -> None:
    assert hostlist_problem(entry) is None


@pytest.mark.parametrize(("entry", "words"), BAD.items(), ids=[repr(k) for k in BAD])
def test_node_names_slurm_cannot_resolve_are_refused(entry: str, words: str) -> None:
    why = hostlist_problem(entry)
    assert why is not None and words in why, why


def test_a_huge_range_is_counted_not_expanded() -> None:
    assert "more than" in (hostlist_problem("n[0-" + "9" * 4000 + "]") or "")


S0 = "scenario.Tests.0."
CASES = [
    Case("nodes-at", "sft", {S0 + "nodes": ["gpu@1"]}, ("nodes[0]", "gpu@1", "'@'"), verbs=("dry-run",)),
    Case("nodes-open-range", "sft", {S0 + "nodes": ["node[1-"]}, ("nodes[0]", "node[1-"), verbs=("verify-configs",)),
    Case("exclude-space", "sft", {S0 + "exclude_nodes": ["node 1"]}, ("exclude_nodes[0]",), verbs=("dry-run",)),
    Case("system-group-nodes", "sft", {"system.partitions.0.groups": [{"name": "g", "nodes": ["a:b"]}]},
         ("partitions[0].groups[0]", "nodes[0]"), verbs=("verify-configs",)),
]


def test_through_the_cli_nothing_is_written_and_the_file_is_named(tmp_path) -> None:
    outcomes = run_all(CASES, tmp_path)
    for (cid, verb), o in outcomes.items():
        assert o.returncode != 0, (cid, verb, o.output[-1500:])
        assert "Traceback" not in o.output
        assert [e for e in o.case.expect if e not in o.output] == [], (cid, o.output[-1500:])
        assert ".toml" in o.output and "Fix: " in o.output
        assert [p for p in o.new_files if o.out_dir in p.parents] == []
