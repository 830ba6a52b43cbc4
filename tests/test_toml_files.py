"""A configuration file that is not UTF-8 or not TOML: one line naming the file, the place and the fix, exit 2, no
traceback and no output folder (cli.py toml_problems runs before CloudAI reads anything)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONF, run_cli, write_case

TEST = ('name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "h100"\n')
SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n'
SYSTEM = (CONF / "system" / "slurm_h100_ib.toml").read_text()

CASES = {
    "test not utf-8": ("test", TEST.replace('"d"', '"caf\xe9"').encode("latin-1"), "not UTF-8 text (byte 0xe9",
                       "save the file as UTF-8"),
    "scenario not utf-8": ("scenario", b'name = "\xff"\n', "not UTF-8 text (byte 0xff", "save the file as UTF-8"),
    "system not utf-8": ("system", SYSTEM.encode() + b'\n# \xc3\x28\n', "not UTF-8 text (byte 0xc3",
                         "save the file as UTF-8"),
    "scenario not toml": ("scenario", b'name = "case"\n[[Tests]\n', "not valid TOML (", "at line 2"),
    "test not toml": ("test", b'name = "case\n', "not valid TOML (", "correct the file"),
    "system not toml": ("system", b"scheduler = slurm\n", "not valid TOML (", "correct the file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("verb", ["dry-run", "preflight"])
def test_a_broken_file_is_named_without_a_traceback(case: str, verb: str, tmp_path: Path) -> None:
    which, data, message, fix = CASES[case]
    tests_dir, scenario = write_case(tmp_path, TEST, SCENARIO)
    system = tmp_path / "system.toml"
    system.write_text(SYSTEM)
    target = {"test": tests_dir / "case.toml", "scenario": scenario, "system": system}[which]
    target.write_bytes(data)
    out = tmp_path / "out"
    proc = run_cli(verb, "--system-config", str(system), "--test-scenario", str(scenario), "--output-dir", str(out),
                   cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert f"{target.name}: {message}" in output and fix in output, output
    assert "Traceback" not in output
    assert not out.exists()


# --- issue 26: depth and dependency cycles, the pure checks behind the CLI's messages (tests/hostile has the CLI) ---
def test_nesting_depth_counts_every_shape_without_recursion() -> None:
    from cloudai_mbridge.cli.config_files import MAX_TOML_DEPTH, nesting_depth, tomllib

    # the file itself is a table: depth 1
    assert nesting_depth(tomllib.loads('a = 1\n[b.c]\nd = [[1], {e = 2}]\n')) == (5, "b.c.d[1]")
    deep: dict = {}
    node = deep
    for _ in range(100_000):  # far past Python's recursion limit
        node["a"] = {}
        node = node["a"]
    depth, where = nesting_depth(deep)
    assert depth == MAX_TOML_DEPTH + 1 and where.startswith("a.a.a")


def test_dependency_cycles() -> None:
    from cloudai_mbridge.cli.config_files import dependency_cycles

    def t(tid: str, *deps: str) -> dict:
        return {"id": tid, "dependencies": [{"type": "end_post_comp", "id": d} for d in deps]}

    assert dependency_cycles([t("a", "b"), t("b", "c"), t("c", "a")]) == [["a", "b", "c", "a"]]
    assert dependency_cycles([t("c", "a"), t("a", "b"), t("b", "c")]) == [["a", "b", "c", "a"]]  # from its least id
    assert dependency_cycles([t("a", "b", "c"), t("b", "c"), t("c")]) == []  # a diamond is no cycle
    assert dependency_cycles([t("a", "ghost")]) == []  # an unknown id is CloudAI's to report
    assert dependency_cycles([t("x", "x"), t("a", "b"), t("b", "a")]) == [["x", "x"], ["a", "b", "a"]]
    ring = [t(str(i), str(i + 1)) for i in range(100_000)] + [t("100000", "0")]
    (cycle,) = dependency_cycles(ring)  # no recursion: a 100,001-test ring
    assert len(cycle) == 100_002 and cycle[0] == cycle[-1] == "0"
