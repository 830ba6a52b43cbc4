"""The training payload: ``python3 -m mbridge_payload.train --config <run>/mbridge_config.json`` (see __main__.py).

config.py reads and checks the config, bridge.py and mcore.py are the two engines, flops.py counts the model's
FLOPs, log.py prints the lines the metrics read.
"""
