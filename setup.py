"""Only here to put cloudai_mbridge-autoload.pth at the root of site-packages (pyproject.toml has the rest)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "cloudai_mbridge-autoload.pth"


class BuildWithPth(build_py):
    def _pth_target(self) -> Path:
        # An editable wheel is assembled from the install command's lib folder, a normal one from build_lib.
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        return Path(root) / PTH

    def run(self) -> None:
        super().run()
        self.copy_file(str(Path(__file__).parent / PTH), str(self._pth_target()), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(self._pth_target())]


setup(cmdclass={"build_py": BuildWithPth})
