"""Make plain ``cloudai`` see the plugin: a ``.pth`` file imports this module at interpreter start.

It costs one meta-path entry and no CloudAI import: the plugin registers right after ``cloudai`` itself finishes
importing, and only then. Set ``CLOUDAI_MBRIDGE_AUTOLOAD=0`` to switch it off (CloudAI's own test suite counts its
built-in test definitions and would see ours).
"""

from __future__ import annotations

import importlib.util
import os
import sys

ENV_SWITCH = "CLOUDAI_MBRIDGE_AUTOLOAD"


class _AfterCloudAI:
    """A meta-path finder (only ``find_spec`` is needed). Not an ``importlib.abc.MetaPathFinder`` subclass: importing
    importlib.abc costs ~60 ms at every interpreter start in the venv (importlib.resources, tempfile, random), a
    window in which a signal meets no handler of ours."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "cloudai":
            return None
        sys.meta_path.remove(self)  # one shot: let the regular finders locate cloudai
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_then_register(module):
            original(module)
            if _plugin_import_in_progress():
                return  # code that imports our modules first registers explicitly (register() is idempotent)
            try:
                from cloudai_mbridge.registration import register

                register()
            except Exception as exc:  # a broken plugin must not break plain cloudai
                print(f"cloudai-mbridge: plugin not loaded: {exc}", file=sys.stderr)

        loader.exec_module = exec_then_register
        return spec


def _plugin_import_in_progress() -> bool:
    """True while one of our own modules is half-imported (it imported cloudai); registering now would be circular."""
    return any(
        name.startswith("cloudai_mbridge.") and getattr(getattr(mod, "__spec__", None), "_initializing", False)
        for name, mod in list(sys.modules.items())
    )


def install() -> None:
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    if "cloudai" in sys.modules or any(isinstance(f, _AfterCloudAI) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _AfterCloudAI())


install()
