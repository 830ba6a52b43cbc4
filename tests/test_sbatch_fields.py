"""Issue 32: what an sbatch script carries is what dry-run accepted. Each value on an #SBATCH line is read back by a
model of sbatch's own parser (Slurm's src/sbatch/opt.c: _next_line cuts at '\\n', _get_argument splits at unquoted
whitespace, '"' and "'" group, '\\' escapes the next character, an unquoted '#' ends the line, "hetjob"/"packjob"
anywhere splits the job) and must come back as exactly one word equal to it, or be refused with a message naming the
field and the value. tests/slurm/test_sbatch_fields_slurm.py checks the same with the real sbatch."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import CONF, slurm_strategy
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import SETTINGS

from cloudai_mbridge.launch.shell import SbatchFieldError, directive_word, env_exports
from cloudai_mbridge.launch.slurm import SbatchSpec, SrunStep, extra_sbatch_directive, render_sbatch


def sbatch_words(line: str) -> list[str]:
    """The words sbatch takes from one ``#SBATCH`` line (a port of opt.c's loop over _get_argument)."""
    assert line.startswith("#SBATCH")
    assert "\n" not in line and "\0" not in line
    if re.search("hetjob|packjob", line, re.IGNORECASE):
        raise AssertionError(f"sbatch would start a heterogeneous-job component: {line!r}")
    rest, words = line[len("#SBATCH"):], []
    i = 0
    while True:
        while i < len(rest) and rest[i].isspace():
            i += 1
        if i >= len(rest):
            return words
        word, quoted, q_char, escape = [], False, "", False
        while i < len(rest) and (quoted or not rest[i].isspace()):
            c = rest[i]
            if escape:
                escape = False
            elif c == "\\":
                escape, i = True, i + 1
                continue
            elif quoted:
                if c == q_char:
                    quoted, i = False, i + 1
                    continue
            elif c in "\"'":
                quoted, q_char, i = True, c, i + 1
                continue
            elif c == "#":
                return words + (["".join(word)] if word else [])
            word.append(c)
            i += 1
        words.append("".join(word))


@SETTINGS
@given(st.text(st.characters(codec="utf-8"), max_size=40))
def test_a_directive_word_reads_back_as_written_or_is_refused(value: str) -> None:
    try:
        written = directive_word(value, "field")
    except SbatchFieldError as exc:
        assert "field" in str(exc) and repr(value) in str(exc) and "Fix:" in str(exc)
        return
    assert sbatch_words(f"#SBATCH --comment={written}") == [f"--comment={value}"]


@pytest.mark.parametrize("value", ["acct --output=/tmp/x.txt --chdir=/etc", 'a"b', "a'b", "a\\b", "x #y", "a\tb c",
                                   "/results/out dir/sc n_1/t id/0/stdout.txt", "%j%x", ""])
def test_directive_words_examples(value: str) -> None:
    try:
        written = directive_word(value, "field")
    except SbatchFieldError:
        assert any(c in value for c in "\t")
        return
    assert sbatch_words(f"#SBATCH --x={written}") == [f"--x={value}"]


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\0b", "x-HetJob", "packjob", "a\x1bb"])
def test_uncarriable_directive_values_are_refused(value: str) -> None:
    with pytest.raises(SbatchFieldError, match="field"):
        directive_word(value, "field")


@pytest.mark.parametrize("arg", ["--exclusive", "--constraint=gpu", "-Cgpu", "--comment=two words \"q\" #1",
                                 "--gres=gpu:8", "--hold"])
def test_extra_sbatch_args_are_one_option_each(arg: str) -> None:
    assert sbatch_words(f"#SBATCH {extra_sbatch_directive(arg)}") == [arg]


@pytest.mark.parametrize("arg", ["hello world", "--constraint gpu", "--output=/tmp/x", "--out=/tmp/x", "-o/tmp/x",
                                 "-D/etc", "-HD/etc", "--chdir=/etc", "--comment", "-C", "exclusive", "--", "-",
                                 "--comment=a\nb", "--comment=hetjob"])
def test_extra_sbatch_args_refused(arg: str) -> None:
    with pytest.raises(SbatchFieldError, match="extra_sbatch_args"):
        extra_sbatch_directive(arg)


def _spec(out: Path, **kw) -> SbatchSpec:
    step = SrunStep(name="train", argv=("python3", "-c", "pass"), num_nodes=2, ntasks_per_node=1,
                    log_name="rank-%t.log")
    return SbatchSpec(job_name="j", output_dir=out, num_nodes=2, steps=(step,), **kw)


def _directive_args(script: str) -> list[str]:
    return [w for line in script.splitlines() if line.startswith("#SBATCH") for w in sbatch_words(line)]


def test_every_directive_of_a_hostile_but_carriable_spec_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "out dir" / "scen 'a' \"b\" #c" / "id $x" / "0"
    script = render_sbatch(_spec(out, partition="p1", account="acct", time_limit="01:00:00",
                                 extra_sbatch_args=("--comment=two words", "--exclusive"),
                                 env={"V": "a b $(x) `y` 'z' \\ ;"}))
    args = _directive_args(script)
    assert f"--output={out}/stdout.txt" in args and f"--error={out}/stderr.txt" in args
    assert "--comment=two words" in args
    assert not [a for a in args if a.startswith(("--chdir", "-D"))]
    srun = next(line for line in script.splitlines() if line.startswith("srun"))
    assert f"--output={out}/logs/rank-%t.log" in shlex.split(srun)
    env_line = next(line for line in script.splitlines() if line.startswith("export V="))
    echoed = subprocess.run(["bash", "-c", f"{env_line}; printf %s \"$V\""], capture_output=True, text=True)
    assert echoed.stdout == "a b $(x) `y` 'z' \\ ;"


@pytest.mark.parametrize(("field", "value"), [("account", "acct --chdir=/etc"), ("partition", "p --chdir=/etc"),
                                              ("time_limit", "1:00:00 --chdir=/etc"), ("account", 'a"b'),
                                              ("account", "a#b"), ("partition", "p\r")])
def test_names_with_what_sbatch_would_split_are_refused(tmp_path: Path, field: str, value: str) -> None:
    with pytest.raises(SbatchFieldError, match=re.escape(repr(value))):
        render_sbatch(_spec(tmp_path, **{field: value}))


@pytest.mark.parametrize("part", ["%j", "%x", "%t", "\\", "\r", "hetjob"])
def test_results_folders_sbatch_would_read_as_patterns_are_refused(tmp_path: Path, part: str) -> None:
    with pytest.raises(SbatchFieldError, match="results folder"):
        render_sbatch(_spec(tmp_path / f"a{part}b"))


@pytest.mark.parametrize("value", ["a\rb", "a\0b"])
def test_env_values_with_cr_or_nul_are_refused(value: str) -> None:
    with pytest.raises(SbatchFieldError, match="MY_VAR"):
        env_exports({"MY_VAR": value})


def test_node_list_and_exclude_reach_the_script(tmp_path: Path) -> None:
    with_list = _directive_args(render_sbatch(_spec(tmp_path, nodelist=("node1", "node[3-4]"))))
    assert "--nodelist=node1,node[3-4]" in with_list
    without = _directive_args(render_sbatch(_spec(tmp_path, exclude=("node2",))))
    assert "--exclude=node2" in without
    with pytest.raises(SbatchFieldError, match="nodes entry"):
        render_sbatch(_spec(tmp_path, nodelist=("node1 --chdir=/etc",)))


def test_the_strategy_passes_the_scenarios_nodes_and_exclude_nodes(tmp_path: Path) -> None:
    args = (CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 4)
    strategy = slurm_strategy(*args, tmp_path / "a")
    strategy.test_run = dataclasses.replace(strategy.test_run, nodes=["node[01-04]"])
    assert strategy.sbatch_spec().nodelist == ("node01", "node02", "node03", "node04")
    strategy = slurm_strategy(*args, tmp_path / "b")
    strategy.test_run = dataclasses.replace(strategy.test_run, exclude_nodes=["node07"])
    spec = strategy.sbatch_spec()
    assert spec.nodelist == () and spec.exclude == ("node07",)
    assert "#SBATCH --exclude=node07" in render_sbatch(spec)


@pytest.mark.parametrize(("field", "value"), [
    ("checkpoint_dir", "/fsx/ck,/etc"), ("data", "/fsx/d,/root/.ssh:/m"), ("hf_config_dir", "/fsx/cfg:/root"),
    ("hf_model_id", "/fsx/models/K,/root/.ssh:/m"),
])
def test_a_cluster_path_with_a_comma_or_colon_is_refused_not_mounted(tmp_path: Path, field: str, value: str) -> None:
    """--container-mounts=SRC:DST,...: a path field holding ',' or ':' would mount a host folder of its choosing."""
    extra = {"task": "sft", "checkpoint_dir": "/fsx/ck"} if field != "checkpoint_dir" else {"task": "sft"}
    strategy = slurm_strategy(CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 1,
                              tmp_path / "out", {**extra, field: value})
    with pytest.raises(SbatchFieldError) as err:
        strategy.sbatch_spec()
    assert f"cmd_args.{field} = {value!r}" in str(err.value) and "Fix:" in str(err.value)
    fine = slurm_strategy(CONF / "system" / "slurm_b300_efa.toml", CONF / "test" / "kimi_k2_sft.toml", 1,
                          tmp_path / "ok", {**extra, field: "/fsx/plain"})
    assert "/fsx/plain:/fsx/plain" in fine.sbatch_spec().container_mounts


# Every character of the categories a terminal does not show (format incl. bidi and zero-width, controls, line and
# paragraph separators), in every kind of #SBATCH field: refused, shown as U+XXXX with its position.
_HIDDEN = [chr(c) for c in range(0x110000) if __import__("unicodedata").category(chr(c)) in ("Cf", "Cc", "Zl", "Zp")]


def test_every_invisible_character_is_refused_in_sbatch_fields(tmp_path: Path) -> None:
    from cloudai_mbridge.launch.shell import sbatch_name, split_args

    assert {"\u202a", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u200b", "\u200d", "\u2060",
            "\ufeff"} <= set(_HIDDEN)
    for ch in _HIDDEN:
        checks = [lambda v: sbatch_name(v, "system account", "fix"), lambda v: directive_word(v, "w"),
                  lambda v: extra_sbatch_directive("--comment=" + v)]
        if ch != "\t":  # in extra_srun_args a tab separates words as a space does
            checks.append(lambda v: split_args(v, "extra_srun_args"))
        for check in checks:
            with pytest.raises(ValueError):
                check(f"ab{ch}c")
    for ch in ("\u202e", "\u200b", "\ufeff", "\u2066"):
        with pytest.raises(SbatchFieldError, match=rf"U\+{ord(ch):04X} .* at position 3"):
            render_sbatch(_spec(tmp_path, account=f"ab{ch}c"))
        with pytest.raises(SbatchFieldError, match=rf"U\+{ord(ch):04X}"):
            render_sbatch(_spec(tmp_path, extra_sbatch_args=(f"--comment=a{ch}",)))
