"""Only here to put cloudai_mbridge-autoload.pth and the module it imports, _cloudai_mbridge_hook.py, at the root of
site-packages, for wheel and editable installs alike (pyproject.toml has the rest)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

START_FILES = ("cloudai_mbridge-autoload.pth", "_cloudai_mbridge_hook.py")


class BuildWithPth(build_py):
    def _targets(self) -> list[Path]:
        # An editable wheel is assembled from the install command's lib folder, a normal one from build_lib.
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        return [Path(root) / name for name in START_FILES]

    def run(self) -> None:
        super().run()
        for name, target in zip(START_FILES, self._targets(), strict=True):
            self.copy_file(str(Path(__file__).parent / name), str(target), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *map(str, self._targets())]


setup(cmdclass={"build_py": BuildWithPth})
