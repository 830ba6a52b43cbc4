"""What runs inside the job. Imports only the stdlib, torch, megatron and uccl (containers have nothing else).

The generator copies this package into the run's output folder as ``mbridge_payload`` and starts it with
``python3 -m mbridge_payload.<entry>``, so modules here use relative imports only.
"""
