"""Make plain ``cloudai`` see the plugin: the plugin registers right after ``cloudai`` itself finishes importing.

What runs at every interpreter start is not here: ``cloudai_mbridge-autoload.pth`` (one line at the root of
site-packages) reads ``CLOUDAI_MBRIDGE_AUTOLOAD`` (``0``, ``false``, ``no`` or ``off``: nothing of the plugin is
imported; CloudAI's own test suite runs that way as CI's baseline) and otherwise imports ``_cloudai_mbridge_hook``
beside it, a one-shot meta-path finder that imports this module only when something imports ``cloudai``. Importing
this package at start instead cost 0.8 ms (and ``importlib.util`` 6 ms) more per interpreter:
benchmarks/autoload_cost.py.
"""

import sys


def spec_of_cloudai(fullname):
    """CloudAI's own module spec, its loader wrapped to register the plugin once ``cloudai`` has executed."""
    import importlib.util

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
