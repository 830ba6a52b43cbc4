"""The part of cloudai-mbridge that runs at every interpreter start (imported by cloudai_mbridge-autoload.pth).

It puts a one-shot meta-path finder first and imports nothing: only when something imports ``cloudai`` does it import
``cloudai_mbridge._autoload``, whose spec registers the plugin right after CloudAI has executed. It lives beside the
.pth at the root of site-packages (setup.py puts both there, for wheel and editable installs alike) so that an
interpreter that never imports CloudAI pays for one small cached module and no package (benchmarks/autoload_cost.py).
A plugin that is gone (an editable checkout deleted) leaves ``cloudai`` importing as if the hook were not there.
"""

import sys


class CloudAIMBridgeHook:
    """Not an ``importlib.abc.MetaPathFinder`` subclass: importlib.abc (and importlib.util) cost milliseconds."""

    def find_spec(self, name, path=None, target=None):
        if name != "cloudai":
            return None
        sys.meta_path.remove(self)  # one shot: the regular finders locate cloudai
        try:
            from cloudai_mbridge._autoload import spec_of_cloudai
        except ImportError:
            return None
        return spec_of_cloudai(name)


if "cloudai" not in sys.modules and not any(type(f).__name__ == "CloudAIMBridgeHook" for f in sys.meta_path):
    sys.meta_path.insert(0, CloudAIMBridgeHook())
