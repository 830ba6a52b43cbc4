"""cloudai-mbridge: Megatron-Bridge MoE training, dispatcher A/B and refit benchmarks as CloudAI tests.

Importing this package does not import CloudAI; ``cloudai_mbridge.registration.register()`` does.
"""

__version__ = "0.1.0"
