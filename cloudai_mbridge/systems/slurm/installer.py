"""CloudAI's Slurm installer, minus one over-strict check.

CloudAI's SlurmInstaller refuses to install anything unless ``srun --help`` lists pyxis' ``--container-image`` and
``--container-mounts``, even when no test of the scenario runs in a container (the refit smoke test runs on the
host's Python). This subclass asks for the pyxis options only when a container image is among the items; with one,
it behaves exactly like CloudAI's.

It is never the Registry's installer for plain ``cloudai``: ``cloudai-mbridge run`` puts it there for the length of
the command, and only for a scenario whose every test is ours (cli/session.py, use_our_installer).
"""

from __future__ import annotations

from collections.abc import Iterable

from cloudai.core import DockerImage, Installable, InstallStatusResult
from cloudai.systems.slurm import SlurmInstaller

PYXIS_OPTIONS = ("--container-image", "--container-mounts")


class MBridgeSlurmInstaller(SlurmInstaller):
    def install(self, items: Iterable[Installable]) -> InstallStatusResult:
        items = list(items)
        if not any(isinstance(item, DockerImage) for item in self.all_items(items)):
            required = SlurmInstaller.REQUIRED_SRUN_OPTIONS
            self.REQUIRED_SRUN_OPTIONS = tuple(o for o in required if o not in PYXIS_OPTIONS)
        return super().install(items)
