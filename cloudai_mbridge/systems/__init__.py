"""What talks to a cluster or installs for one, per scheduler (as CloudAI keeps cloudai/systems/<scheduler>/).

common.py holds what both schedulers and the workloads share: system facts, secret screening, the image, the run
folder. Workloads (cloudai_mbridge/workloads/) import from here, never the other way round.
"""
