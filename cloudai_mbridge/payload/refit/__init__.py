"""The refit payload: ``python3 -m mbridge_payload.refit --config <run>/mbridge_config.json`` (see __main__.py).

config.py (stdlib only) reads the config and derives both sides' layouts, models.py and groups.py build them,
adapter.py fits Megatron-Core's refit service, coalesce.py packs its transfers, verify.py checks the weights, and
local.py starts N CPU/GPU ranks on one machine for tests and benchmarks.
"""
