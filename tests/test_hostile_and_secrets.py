"""TOML strings are data: shell metacharacters never execute, and credentials never land in generated files."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import toml
from helpers import CONF, SECRETS, assert_no_secret_leaked, dry_run, slurm_strategy, write_case

HOSTILE = [
    '"; touch {pwn}/semicolon; echo "',
    "$(touch {pwn}/dollar)",
    "`touch {pwn}/backtick`",
    "x\ntouch {pwn}/newline",
    "'; touch {pwn}/quote; '",
    "${{IFS}}touch${{IFS}}{pwn}/ifs",
]

SRUN_STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def _stub_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN_STUB)
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho node-001\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_strings_never_execute(payload: str, tmp_path: Path) -> None:
    pwn = tmp_path / "pwn"
    pwn.mkdir()
    value = payload.format(pwn=pwn)
    abs_value = "/" + value.replace("\n", " ")  # path fields must be absolute, single-line (validated)
    # an image reference has no whitespace (validated): the hostile part stays, spaces become ${IFS}
    image = "nvcr.io/x:" + re.sub(r"\s", "${IFS}", value)
    system_toml = tmp_path / "system.toml"
    system = toml.load(CONF / "system" / "slurm_b300_efa.toml")
    system["global_env_vars"]["HOSTILE_SYSTEM"] = value
    system["extra_srun_args"] = f"--comment={json.dumps(value.replace(chr(10), ' '))}"
    system_toml.write_text(toml.dumps(system))
    test_toml = tmp_path / "test.toml"
    test = toml.load(CONF / "test" / "kimi_k2_sft.toml")
    test["extra_env_vars"] = {"HOSTILE_TEST": value}
    test_toml.write_text(toml.dumps(test))
    out = tmp_path / "out $(touch x)"
    strategy = slurm_strategy(
        system_toml,
        test_toml,
        32,
        out,
        {
            "container_image": image,
            "data": abs_value,
            "checkpoint_dir": abs_value,
            "hf_model_id": abs_value,
        },
    )
    strategy.gen_exec_command()
    script = out / "cloudai_sbatch_script.sh"

    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    log = tmp_path / "argv.log"
    env = {
        **os.environ,
        "PATH": f"{_stub_bin(tmp_path)}:{os.environ['PATH']}",
        "ARGV_LOG": str(log),
        "SLURM_JOB_NODELIST": "node-001",
        "SLURM_JOB_ID": "42",
    }
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert list(pwn.iterdir()) == [], "a TOML string was executed"
    assert not (tmp_path / "x").exists()

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2, "conversion step and training step"
    for argv in calls:
        assert f"--container-image={image}" in argv, "the image must reach srun as one untouched argument"
        assert f"--comment={value.replace(chr(10), ' ')}" in argv
    config = json.loads((out / "mbridge_config.json").read_text())
    assert (config["data"], config["checkpoint_dir"], config["hf_model_id"]) == (abs_value, abs_value, abs_value)


def test_exported_values_survive_verbatim(tmp_path: Path) -> None:
    value = "$(touch nope) `x` 'q' \"dq\" ; & | > <"
    test_toml = tmp_path / "test.toml"
    test = toml.load(CONF / "test" / "kimi_k2_dispatcher_ab.toml")
    test["extra_env_vars"] = {"HOSTILE": value}
    test_toml.write_text(toml.dumps(test))
    out = tmp_path / "out"
    strategy = slurm_strategy(
        CONF / "system" / "slurm_b300_efa.toml",
        test_toml,
        32,
        out,
        {"mbs": 1, "dispatcher": "alltoall", "moe_a2a_overlap": False},
    )
    strategy.gen_exec_command()
    lines = [
        ln for ln in (out / "cloudai_sbatch_script.sh").read_text().splitlines() if ln.startswith("export HOSTILE")
    ]
    proc = subprocess.run(
        ["bash", "-c", f'{lines[0]}; printf %s "$HOSTILE"'], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.stdout == value
    assert not (tmp_path / "nope").exists()




def test_tokens_from_the_environment_never_reach_generated_files(tmp_path: Path) -> None:
    res = dry_run(
        CONF / "system" / "slurm_b300_efa.toml", CONF / "test_scenario" / "kimi_k2_sft.toml", tmp_path, env=SECRETS
    )
    assert res.returncode == 0, res.output
    assert_no_secret_leaked(tmp_path, res.output, "cloudai_sbatch_script.sh")


def test_a_token_written_into_the_test_toml_is_refused(tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
        'model = "kimi_k2_proxy"\ngpu = "h100"\n[extra_env_vars]\nHF_TOKEN = "hf_written_in_toml"\n',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    assert res.returncode != 0
    assert "[no-secrets-in-toml]" in res.output and "extra_env_vars.HF_TOKEN" in res.output
    assert "export it in the shell" in res.output
    assert "Traceback" not in res.output
    assert not [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and b"hf_written_in_toml" in p.read_bytes() and p.suffix != ".toml"
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('model = "kimi_k2"\ngpu = "h100"\ntpp = 2\n', "cmd_args.tpp"),
        ('model = "kimi_k2"\ngpu = "h100"\ntp = "eight"\n', "cmd_args.tp"),
        ('model = "kimi_k3"\ngpu = "h100"\n', "cmd_args.model"),
        ('model = "kimi_k2"\ngpu = "h100"\nmbs = -4\n', "cmd_args.mbs"),
        ('model = "kimi_k2"\ngpu = "a100"\n', "cmd_args.gpu"),
        ('model = "kimi_k2"\ngpu = "h100"\ndata = "relative/path"\n', "cmd_args.data"),
        ('model = "kimi_k2"\ngpu = "h100"\nrecompute_modules = "core_attn,bogus"\n', "cmd_args.recompute_modules"),
    ],
)
def test_malformed_toml_names_the_field(body: str, field: str, tmp_path: Path) -> None:
    _, scenario = write_case(
        tmp_path,
        f'name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n{body}',
        'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n',
    )
    res = dry_run(CONF / "system" / "slurm_h100_ib.toml", scenario, tmp_path)
    assert res.returncode != 0
    assert f"'{field}" in res.output, res.output
    assert "Traceback" not in res.output
