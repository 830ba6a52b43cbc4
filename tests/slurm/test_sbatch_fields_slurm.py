"""Issue 32 against the real sbatch (tests/slurm/start.sh): a script generated from hostile but carriable field
values (spaces, quotes, '#', '$' in the results folder and the scenario's names; an extra_sbatch_args value with
spaces; the scenario's nodes / exclude_nodes) is accepted by ``sbatch --test-only``, and the job sbatch makes of it
(submitted held, then cancelled) has the output files, working folder, comment and node lists the fields said: no
option injected, nothing written elsewhere. tests/test_sbatch_fields.py checks the same with a model of the parser."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from slurm_support import HERE, SlurmCluster, run

from cloudai_mbridge.launch.slurm import SbatchSpec, SrunStep, render_sbatch

CONF = HERE.parent.parent / "conf"
NAMES = ["out dir", "scen 'a' \"b\"", "id #1 $HOME `x`", "back\u00e9", "--chdir=etc"]


def _job_fields(job: str) -> dict[str, str]:
    text = run("scontrol", "show", "job", "-o", job)
    fields: dict[str, str] = {}
    key = None
    for word in text.split(" "):  # values may hold spaces: a word without '=' continues the previous value
        k, sep, v = word.partition("=")
        if sep and k and k.replace("/", "").replace(":", "").isalnum():
            key, fields[k] = k, v
        elif key is not None:
            fields[key] += " " + word
    return {k: v.strip() for k, v in fields.items()}


def _submit_held(script: Path) -> str:
    test = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
    assert test.returncode == 0, f"sbatch --test-only refused it: {test.stderr}\n{script.read_text()}"
    return run("sbatch", "--parsable", "--hold", str(script)).strip().split(";")[0]


@pytest.mark.slurm
@pytest.mark.parametrize("name", NAMES)
def test_hostile_but_carriable_fields_reach_sbatch_as_written(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                              name: str) -> None:
    out = tmp_path / name / "0"
    out.mkdir(parents=True)
    step = SrunStep(name="noop", argv=("true",), num_nodes=2, ntasks_per_node=1, log_name="rank-%t.log")
    comment = f"two words \"q\" 'r' #c {name}"
    spec = SbatchSpec(job_name=name, output_dir=out, num_nodes=2, steps=(step,), partition="local",
                      time_limit="00:01:00", extra_sbatch_args=(f"--comment={comment}",),
                      nodelist=tuple(slurm_cluster.nodes[:2]))
    script = out / "job.sh"
    script.write_text(render_sbatch(spec))
    job = _submit_held(script)
    try:
        fields = _job_fields(job)
        assert fields["StdOut"] == str(out / "stdout.txt"), fields
        assert fields["StdErr"] == str(out / "stderr.txt"), fields
        assert fields["WorkDir"] == str(Path.cwd()), fields  # no --chdir came in
        assert fields["Comment"] == comment, fields
        assert fields["NumNodes"].split("-")[0] == "2", fields
        assert fields["ReqNodeList"] not in ("", "(null)"), fields
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=60)


@pytest.mark.slurm
def test_scenario_nodes_and_exclude_nodes_reach_the_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(HERE.parent))
    from helpers import slurm_strategy

    first, second = slurm_cluster.nodes[:2]
    args = (CONF / "system" / "local_slurm.toml", CONF / "test" / "refit_cpu_smoke.toml", 1)
    for where, edit, key, want in (("a", {"nodes": [first]}, "ReqNodeList", first),
                                   ("b", {"exclude_nodes": [first]}, "ExcNodeList", first)):
        strategy = slurm_strategy(*args, tmp_path / where)
        strategy.test_run = dataclasses.replace(strategy.test_run, **edit)
        script = tmp_path / where / "job.sh"
        script.write_text(render_sbatch(strategy.sbatch_spec()))
        job = _submit_held(script)
        try:
            assert _job_fields(job)[key] == want
        finally:
            subprocess.run(["scancel", job], capture_output=True, timeout=60)
    assert second  # two nodes: excluding one still leaves one to run on
