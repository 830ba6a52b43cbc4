"""Dispatch/combine microbenchmark of Megatron-Core's MoE token dispatchers (see lines.py for what it prints)."""
