"""Kubernetes: strategy.py renders a workload into our objects and manifests, runner.py is the System + Runner that
creates them on a cluster (and the registration that puts both into CloudAI)."""
