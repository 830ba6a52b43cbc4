"""The Slurm command generation both workloads share: stage payload + config, render our own sbatch script.

We do not use CloudAI's srun wrapper (``bash -c "source env_vars.sh; ..."``): it interpolates values into a
double-quoted shell string. Our script is rendered by launch/slurm.py, where every value is quoted.
"""

from __future__ import annotations

import json
import shlex
import sys
from abc import abstractmethod
from typing import Any

from cloudai.systems.slurm import SlurmCommandGenStrategy

from ...atomic import write_atomic
from ...catalog.gpus import GPU_ENV
from ...launch.payload import payload_argv, stage_payload, write_config
from ...launch.shell import SbatchFieldError
from ...launch.slurm import SbatchSpec, SrunStep, render_sbatch, srun_line
from ...rules import PointRejectedError, Violation
from ..common import generated_by, open_run_dir, store_test_run

SBATCH_NAME = "cloudai_sbatch_script.sh"


class MBridgeSlurmStrategy(SlurmCommandGenStrategy):
    entry: str = ""

    @property
    def python(self) -> str:
        """The container's python3; without a container, the interpreter running CloudAI (sys.executable): the
        python3 first on a compute node's PATH is rarely the environment that has torch and megatron-core."""
        return "python3" if self.image_url() else sys.executable

    def _container_mounts(self) -> list[str]:
        return []

    @abstractmethod
    def payload_config(self) -> dict[str, Any]: ...

    @abstractmethod
    def base_env(self) -> dict[str, str]: ...

    def check(self) -> list[Violation]:
        """Rule violations of this point; generation refuses to write a job that Megatron rejects."""
        return self.test_run.test.violations(self.test_run, self.system)

    def image_url(self) -> str | None:
        image = getattr(self.test_run.test, "docker_image", None)
        return str(image.installed_path) if image is not None else None

    def mount_sources(self) -> dict[str, str]:
        """Paths on the cluster the job reads, by the field that names them: each is mounted at the same path."""
        return {}

    def extra_mounts(self) -> list[str]:
        """The mounts of mount_sources. ``--container-mounts`` separates mounts with ',' and source from destination
        with ':', so a path holding either would mount something else (a host folder of the path's choosing)."""
        for field, path in self.mount_sources().items():
            bad = next((c for c in ",:" if c in path), None)
            if bad:
                raise SbatchFieldError(
                    f"{field} = {path!r} holds {bad!r}: it is mounted into the container with "
                    "--container-mounts=SRC:DST,..., where ',' separates mounts and ':' source from destination. "
                    f"Fix: use a path without ',' or ':' for {field} (a symbolic link to it will do).")
        return [f"{p}:{p}" for p in dict.fromkeys(self.mount_sources().values())]

    def pre_steps(self) -> list[SrunStep]:
        return []

    def ntasks_per_node(self) -> int:
        return self.system.gpus_per_node or self.system.ntasks_per_node or 1

    def env(self) -> dict[str, str]:
        env = dict(self.base_env())
        # the plugin's own setting (the system's GPU model) is no job variable
        env.update({k: str(v) for k, v in self.system.global_env_vars.items() if k != GPU_ENV})
        env.update({k: str(v) for k, v in self.test_run.test.extra_env_vars.items()})
        return env

    def main_step(self) -> SrunStep:
        num_nodes, _ = self.get_cached_nodes_spec()
        config = self.test_run.output_path.absolute() / "mbridge_config.json"
        return SrunStep(
            name=self.entry,
            argv=payload_argv(self.python, self.entry, config),
            num_nodes=num_nodes,
            ntasks_per_node=self.ntasks_per_node(),
            log_name="rank-%t.log",
        )

    def sbatch_spec(self) -> SbatchSpec:
        out = self.test_run.output_path.absolute()
        num_nodes, node_list = self.get_cached_nodes_spec()
        image = self.image_url()
        for mount in self.test_run.test.extra_container_mounts if image else ():
            if "," in str(mount):
                raise SbatchFieldError(
                    f"extra_container_mounts entry {str(mount)!r} holds ',', which --container-mounts reads as the "
                    "start of another mount. Fix: give each mount as its own list entry, SRC:DST without ','.")
        mounts = [f"{out}:{out}", *self.test_run.test.extra_container_mounts, *self.extra_mounts()] if image else []
        return SbatchSpec(
            job_name=self.job_name(),
            output_dir=out,
            num_nodes=num_nodes,
            steps=(*self.pre_steps(), self.main_step()),
            partition=self.system.default_partition,
            account=self.system.account,
            gpus_per_node=self.system.gpus_per_node if self.system.supports_gpu_directives else None,
            time_limit=self.test_run.time_limit,
            extra_sbatch_args=tuple(self.system.extra_sbatch_args),
            # CloudAI's own rule: a resolved node list pins the nodes; exclude_nodes applies only without one
            nodelist=tuple(node_list),
            exclude=tuple(self.test_run.exclude_nodes or ()) if not node_list else (),
            mpi=self.system.mpi,
            container_image=image,
            container_mounts=tuple(mounts),
            container_mount_home=self.system.container_mount_home,
            extra_srun_args=" ".join(a for a in (self.system.extra_srun_args, self.test_run.extra_srun_args) if a)
            or None,
            env=self.env(),
            header=f"# generated by {generated_by()}",
        )

    def preview(self) -> None:
        """Everything generation checks, in memory: the rules, then the script and the config rendered (a field the
        script cannot carry raises its own 'Fix:' message); nothing is written."""
        problems = self.check()
        if problems:
            raise PointRejectedError(self.test_run.name, problems)
        render_sbatch(self.sbatch_spec())
        json.dumps(self.payload_config())

    def gen_exec_command(self) -> str:
        problems = self.check()
        script = render_sbatch(self.sbatch_spec()) if not problems else ""
        config = self.payload_config() if not problems else {}
        out = open_run_dir(self.test_run, problems, self.system)  # rendered first: a refusal writes nothing
        stage_payload(out)
        write_config(out, config)
        path = out / SBATCH_NAME
        write_atomic(path, script)
        return f"sbatch {shlex.quote(str(path))}"  # CloudAI runs it through a shell

    def store_test_run(self) -> None:
        store_test_run(self.test_run, " ".join(self.generate_test_command()), self.gen_srun_command())

    def generate_test_command(self) -> list[str]:
        return list(self.main_step().argv)

    def gen_srun_command(self) -> str:
        return srun_line(self.sbatch_spec(), self.main_step())
