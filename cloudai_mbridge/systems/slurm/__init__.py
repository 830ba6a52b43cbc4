"""Slurm: strategy.py renders a workload into our own sbatch script, installer.py is CloudAI's installer minus the
pyxis check for runs without a container."""
