"""The table of hostile inputs (issue 14). Each row: an edit of a real conf/ trio and what the message must name."""

from __future__ import annotations

import dataclasses

from helpers import CONF

from hostile.harness import DELETE, FIFO, Case, Link, Sparse

HF = "hf_" + "Zq7TkLmW3xVbN9pR2sYdHc4gJ8fA6eUoQi"  # Hugging Face token shape (hf_ + 34)
WANDB = "9f1c2ab7e44d0b6358c1f2a9e07d5b34c6a8e912"  # W&B API key shape (40 hex)
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # an AWS secret access key: no shape of its own, only its name
PASSWORD = "Pa55w0rd-in-a-url"  # the password of a URL (https://user:password@host)
RANDOM = "q8ZtR2mXv7LkP4sW9nB3cY6hJ1dF5gA0"  # a generated key under an innocent name
RAW = "s3cr3tRawTokenValue99"  # a raw token where a Kubernetes Secret's name belongs: no shape at all
_LOSS = b'{"0": {"lm loss": 10.4}, "1": {"lm loss": 10.3}}'  # a golden-values file in Bridge's format
_CONFIG = b'{"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]}'  # a model's config.json

_SFT = (CONF / "test" / "kimi_k2_sft.toml").read_bytes()


def _edit(old: bytes, new: bytes) -> bytes:
    assert old in _SFT
    return _SFT.replace(old, new)


T = "test.cmd_args."
S0 = "scenario.Tests.0."
SYS = "system."
ENV = "system.global_env_vars."


def _train_ints() -> list[Case]:
    rows = []
    for key in ("tp", "pp", "ep", "mbs", "gbs", "seq_length", "train_iters"):
        for label, value in (("str", "8"), ("float", 8.0), ("bool", True), ("list_empty", []), ("zero", 0),
                             ("negative", -4), ("huge", 10**30)):
            rows.append(Case(f"train-{key}-{label}", "sft", {T + key: value}, (key,)))
    return rows


def _train_floats() -> list[Case]:
    """Fields that are a finite float in a range (lr: (0, 1], not a sweep; the ncclep receive budget: (0, 1024])."""
    rows = []
    for key, big in (("lr", 2.0), ("moe_expert_rank_capacity_factor", 1e6)):
        for label, value in (("str", "1e-5"), ("bool", True), ("zero", 0.0), ("negative", -1e-5), ("too_big", big),
                             ("nan", float("nan")), ("inf", float("inf")), ("table", {"value": 1e-5})):
            rows.append(Case(f"train-{key}-{label}", "sft", {T + key: value}, (key,)))
    rows.append(Case("train-lr-list", "sft", {T + "lr": [1e-5, 2e-5]}, ("lr",)))
    return rows


def _refit_ints() -> list[Case]:
    rows = []
    for key in ("src.tp", "src.ep", "dst.tp", "iterations", "warmup", "timeout_s", "seq_length", "coalesce_mib",
                "seed"):
        for label, value in (("str", "2"), ("float", 2.5), ("negative", -1), ("huge", 10**30)):
            if key.startswith("dst") and label == "str":
                value = ["1", "4"]
            rows.append(Case(f"refit-{key}-{label}", "refit", {T + key: value}, (key.split(".")[-1],)))
    return rows


CHOICES = [
    Case("train-model-unknown", "sft", {T + "model": "kimi_k3"}, ("model", "kimi_k3")),
    Case("train-model-empty", "sft", {T + "model": ""}, ("model",)),
    Case("train-model-int", "sft", {T + "model": 7}, ("model",)),
    Case("train-model-newline", "sft", {T + "model": "kimi_k2\n"}, ("model",)),
    Case("train-gpu-unknown", "sft", {T + "gpu": "a100x"}, ("gpu", "a100x")),
    Case("train-task-unknown", "sft", {T + "task": "rlhf"}, ("task", "rlhf")),
    Case("train-dispatcher-unknown", "sft", {T + "dispatcher": "magic"}, ("dispatcher", "magic")),
    Case("train-deepep_impl-unknown", "sft", {T + "deepep_impl": "xyz"}, ("deepep_impl", "xyz")),
    Case("train-recompute-unknown", "sft", {T + "recompute": "bogus"}, ("recompute", "bogus")),
    Case("train-precision-unknown", "sft", {T + "precision": "int3"}, ("precision", "int3")),
    Case("train-unknown-field", "sft", {T + "tensor_parallel": 8}, ("tensor_parallel",)),
    Case("train-seed-huge", "sft", {T + "seed": 10**30}, ("seed",)),
    Case("train-seed-negative", "sft", {T + "seed": -1}, ("seed",)),
    Case("train-image-empty", "sft", {T + "container_image": ""}, ("container_image",)),
    Case("train-image-space", "sft", {T + "container_image": "nvcr.io/x y"}, ("container_image",)),
    Case("train-image-newline", "sft", {T + "container_image": "nvcr.io/x\nrm -rf /"}, ("container_image",)),
    Case("train-hf-empty", "sft", {T + "hf_model_id": ""}, ("hf_model_id",)),
    Case("train-hf-dotdot", "sft", {T + "hf_model_id": "../../etc/passwd"}, ("hf_model_id",)),
    Case("train-hf-token-shaped", "sft", {T + "hf_model_id": HF}, ("hf_model_id",), secret=HF),
    Case("train-hf-path-tab", "sft", {T + "hf_model_id": "/fsx/models/Kimi\tK2"}, ("hf_model_id",)),
    Case("train-ckpt-relative", "sft", {T + "checkpoint_dir": "ckpt/kimi"}, ("checkpoint_dir", "ckpt/kimi")),
    Case("train-ckpt-newline", "sft", {T + "checkpoint_dir": "/fsx/a\nb"}, ("checkpoint_dir",)),
    Case("train-convert-without-ckpt", "sft", {T + "checkpoint_dir": DELETE}, ("checkpoint_dir",)),
    Case("train-data-relative", "sft", {T + "data": "data/sft"}, ("data", "data/sft")),
    Case("train-data-int", "sft", {T + "data": 5}, ("data",)),
    # written as TOML escapes by hand: the toml package would mangle a control character ("\x01" -> "x01")
    Case("train-data-control-char", "sft", raw={"test": _edit(b'data = "/fsx/data/sft"', b'data = "/fsx/d\\u0001x"')},
         expect=("data",)),
    Case("train-ckpt-tab", "sft", raw={"test": _edit(b'checkpoint_dir = "/fsx/checkpoints/kimi-k2-base-mcore"',
                                                     b'checkpoint_dir = "/fsx/a\\tb"')}, expect=("checkpoint_dir",)),
    Case("train-pp-1e8", "sft", {T + "pp": 10**8}, ("pp",)),
    Case("train-vp-2e30", "sft", {T + "vp": 2**30}, ("vp",)),
    Case("train-mtp-huge", "sft", {T + "mtp_num_layers": 2**31 - 1}, ("mtp_num_layers",)),
    Case("train-mtp-str", "sft", {T + "mtp_num_layers": "1"}, ("mtp_num_layers",)),
    Case("train-golden-threshold-str", "sft", {T + "golden_thresholds": {"timing_threshold": "0.1"}},
         ("timing_threshold",)),
    Case("train-vp-str", "sft", {T + "vp": "2"}, ("vp",)),
    Case("train-vp-zero", "sft", {T + "vp": 0}, ("vp",)),
    Case("train-gbs-indivisible", "sft", {T + "gbs": 127}, ("gbs", "127")),
    Case("train-tp-not-dividing", "sft", {T + "tp": 3}, ("tp",)),
    Case("train-ep-too-large", "sft", {T + "ep": 1024}, ("ep", "1024")),
    Case("train-recompute-modules-bad", "sft", {T + "recompute_modules": "everything"}, ("recompute_modules",)),
    Case("train-env-int", "sft", {"test.extra_env_vars": {"NCCL_DEBUG": 5}}, ("NCCL_DEBUG",)),
    Case("train-env-bad-name", "sft", {"test.extra_env_vars": {"BAD NAME": "1"}}, ("BAD NAME",)),
    Case("train-env-equals-name", "sft", {"test.extra_env_vars": {"A=B": "1"}}, ("A=B",)),
    Case("train-env-table", "sft", {"test.extra_env_vars": {"X": {"y": 1}}}, ("X",)),
    Case("train-template-unknown", "sft", {"test.test_template_name": "MBridgeTrainin"}, ("MBridgeTrainin",)),
    Case("train-no-cmd-args", "sft", {"test.cmd_args": DELETE}, ("cmd_args",)),
    Case("train-no-name", "sft", {"test.name": DELETE}, ("name",)),
]

SWEEPS = [
    Case("ab-empty-sweep-mbs", "ab", {T + "mbs": []}, ("mbs",)),
    Case("ab-empty-sweep-dispatcher", "ab", {T + "dispatcher": []}, ("dispatcher",)),
    Case("ab-sweep-str-elements", "ab", {T + "mbs": ["1", "4"]}, ("mbs",)),
    Case("ab-sweep-float-elements", "ab", {T + "mbs": [1.0, 4.0]}, ("mbs",)),
    Case("ab-sweep-bool-elements", "ab", {T + "moe_a2a_overlap": ["no", "yes"]}, ("moe_a2a_overlap",)),
    Case("ab-every-point-rejected", "ab", {T + "tp": [3, 5]}, ("tp",)),
    Case("ab-sweep-unknown-dispatcher", "ab", {T + "dispatcher": ["alltoall", "magic"]}, ("magic",)),
    Case("ab-sweep-nested-list", "ab", {T + "mbs": [[1], [4]]}, ("mbs",)),
    Case("ab-num-nodes-sweep-zero", "ab", {S0 + "num_nodes": [0, 32]}, ("num_nodes",)),
]

SCENARIOS = [
    Case("scn-num-nodes-zero", "sft", {S0 + "num_nodes": 0}, ("num_nodes",)),
    Case("scn-num-nodes-negative", "sft", {S0 + "num_nodes": -1}, ("num_nodes",)),
    Case("scn-num-nodes-str", "sft", {S0 + "num_nodes": "32"}, ("num_nodes",)),
    Case("scn-num-nodes-float", "sft", {S0 + "num_nodes": 1.5}, ("num_nodes",)),
    Case("scn-num-nodes-huge", "sft", {S0 + "num_nodes": 10**9}, ("num_nodes",)),
    Case("scn-time-limit-minutes-60", "sft", {S0 + "time_limit": "01:60:00"}, ("time_limit", "01:60:00")),
    Case("scn-time-limit-99", "sft", {S0 + "time_limit": "99:99:99"}, ("time_limit", "99:99:99")),
    Case("scn-time-limit-empty", "sft", {S0 + "time_limit": ""}, ("time_limit",)),
    Case("scn-time-limit-negative", "sft", {S0 + "time_limit": "-1"}, ("time_limit",)),
    Case("scn-time-limit-int", "sft", {S0 + "time_limit": 5}, ("time_limit",)),
    Case("scn-time-limit-newline", "sft", {S0 + "time_limit": "01:00:00\n#SBATCH --x"}, ("time_limit",)),
    Case("scn-id-dotdot", "sft", {S0 + "id": "../../x"}, ("../../x",)),
    Case("scn-id-absolute", "sft", {S0 + "id": "/tmp/cloudai-mbridge-hostile"}, ("/tmp/cloudai-mbridge-hostile",)),
    Case("scn-id-slash", "sft", {S0 + "id": "a/b"}, ("a/b",)),
    Case("scn-id-backslash", "sft", {S0 + "id": "a\\b"}, ("id",)),
    Case("scn-id-nul", "refit", raw={"scenario": b'name = "s"\n[[Tests]]\nid = "a\\u0000b"\n'
                                             b'test_name = "refit_cpu_smoke"\nnum_nodes = 2\n'}, expect=("test id",)),
    Case("scn-id-empty", "sft", {S0 + "id": ""}, ("id",)),
    Case("scn-id-dot", "sft", {S0 + "id": "."}, ("id",)),
    Case("scn-name-dotdot", "sft", {"scenario.name": "../../x"}, ("../../x",)),
    Case("scn-name-absolute", "sft", {"scenario.name": "/tmp/cloudai-mbridge-hostile"}, ("name",)),
    Case("scn-name-empty", "sft", {"scenario.name": ""}, ("name",)),
    Case("scn-test-name-missing", "sft", {S0 + "test_name": "no_such_test"}, ("no_such_test",)),
    Case("scn-no-tests", "sft", {"scenario.Tests": []}, ("scenario.toml",)),
    Case("scn-duplicate-ids", "refit", {"scenario.Tests": [
        {"id": "a", "test_name": "refit_cpu_smoke", "num_nodes": 2, "time_limit": "00:10:00"},
        {"id": "a", "test_name": "refit_cpu_smoke", "num_nodes": 2, "time_limit": "00:10:00"}]}, ("a",)),
    Case("scn-iterations-zero", "sft", {S0 + "iterations": 0}, ("iterations",)),
    Case("scn-iterations-negative", "sft", {S0 + "iterations": -3}, ("iterations",)),
    Case("scn-dependency-unknown", "sft", {S0 + "dependencies": [{"type": "end_post_comp", "id": "ghost"}]},
         ("ghost",)),
    Case("scn-override-tp-str", "sft", {S0 + "cmd_args": {"tp": "8"}}, ("tp",)),
    Case("scn-override-unknown", "sft", {S0 + "cmd_args": {"tpp": 8}}, ("tpp",)),
    Case("scn-extra-srun-unbalanced", "sft", {S0 + "extra_srun_args": "--comment='x"}, ("extra_srun_args",)),
    Case("scn-env-secret-name", "sft", {S0 + "extra_env_vars": {"HF_TOKEN": HF}}, ("HF_TOKEN",), secret=HF),
]

SYSTEMS = [
    Case("sys-gpus-zero", "sft", {SYS + "gpus_per_node": 0}, ("gpus_per_node",)),
    Case("sys-gpus-negative", "sft", {SYS + "gpus_per_node": -8}, ("gpus_per_node",)),
    Case("sys-gpus-str", "sft", {SYS + "gpus_per_node": "8"}, ("gpus_per_node",)),
    Case("sys-ntasks-zero", "sft", {SYS + "ntasks_per_node": 0}, ("ntasks_per_node",)),
    Case("sys-partition-missing", "sft", {SYS + "default_partition": "nope"}, ("nope",)),
    Case("sys-partition-newline", "sft", {SYS + "default_partition": "b300\n#SBATCH --x",
                                         "system.partitions.0.name": "b300\n#SBATCH --x"}, ("partition",)),
    Case("sys-sbatch-newline", "sft", {SYS + "extra_sbatch_args": ["--x\nrm -rf /"]}, ("extra_sbatch_args",)),
    Case("sys-srun-unbalanced", "sft", {SYS + "extra_srun_args": "--comment=\"x"}, ("extra_srun_args",)),
    Case("sys-scheduler-unknown", "sft", {SYS + "scheduler": "pbs"}, ("pbs",)),
    Case("sys-no-name", "sft", {SYS + "name": DELETE}, ("name",)),
    Case("sys-mpi-bogus", "sft", {SYS + "mpi": "bogus mpi"}, ("mpi",)),
    Case("sys-account-newline", "sft", {SYS + "account": "acct\n#SBATCH --x"}, ("account",)),
    Case("sys-env-hf-token", "sft", {ENV + "HF_TOKEN": HF}, ("HF_TOKEN",), secret=HF),
    Case("sys-env-wandb-key", "sft", {ENV + "WANDB_API_KEY": WANDB}, ("WANDB_API_KEY",), secret=WANDB),
    Case("sys-env-token-shape", "sft", {ENV + "MY_SETTING": HF}, ("MY_SETTING",), secret=HF),
    Case("sys-env-wandb-shape", "sft", {ENV + "WANDB_KEYFILE": WANDB}, ("WANDB_KEYFILE",), secret=WANDB),
    Case("sys-env-bad-name", "sft", {ENV + "BAD NAME": "1"}, ("BAD NAME",)),
    Case("sys-partitions-empty", "sft", {SYS + "partitions": []}, ("partition",)),
]

K8S = [
    Case("k8s-token-and-bad-kind", "k8s", {ENV + "HF_TOKEN": HF, ENV + "CLOUDAI_MBRIDGE_K8S_KIND": "deployment"},
         ("CLOUDAI_MBRIDGE_K8S_KIND",), secret=HF),
    Case("k8s-wandb-and-bad-efa", "k8s", {ENV + "WANDB_API_KEY": WANDB, ENV + "CLOUDAI_MBRIDGE_K8S_EFA_DEVICES": "x"},
         ("CLOUDAI_MBRIDGE_K8S_EFA_DEVICES",), secret=WANDB),
    Case("k8s-shape-and-bad-selector", "k8s", {ENV + "SOME_VAR": HF, ENV + "CLOUDAI_MBRIDGE_K8S_NODE_SELECTOR": "{"},
         ("CLOUDAI_MBRIDGE_K8S_NODE_SELECTOR",), secret=HF),
    Case("k8s-kind-bad", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_KIND": "deployment"}, ("deployment",)),
    Case("k8s-efa-negative", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_EFA_DEVICES": "-1"}, ("EFA_DEVICES",)),
    Case("k8s-tolerations-not-list", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_TOLERATIONS": '{"a": 1}'}, ("TOLERATIONS",)),
    Case("k8s-pvc-bad-name", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_RESULTS_PVC": "Bad_Name!"}, ("Bad_Name!",)),
    Case("k8s-mounts-relative", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_MOUNTS": '{"fsx": "fsx-claim"}'}, ("MOUNTS",)),
    Case("k8s-shm-bad", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_SHM_SIZE": "lots"}, ("lots",)),
    Case("k8s-credentials-bad", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_CREDENTIALS": '{"HF_TOKEN": ""}'},
         ("CREDENTIALS",)),
    Case("k8s-unknown-knob", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_NODESELECTOR": "{}"}, ("NODESELECTOR",)),
    Case("k8s-namespace-bad", "k8s", {SYS + "default_namespace": "Bad Namespace"}, ("namespace",)),
    Case("k8s-gpus-zero", "k8s", {SYS + "gpus_per_node": 0}, ("gpus_per_node",)),
    Case("k8s-token-in-test-env", "k8s", {"test.extra_env_vars": {"HF_TOKEN": HF}}, ("HF_TOKEN",), secret=HF),
]

FILES = [
    Case("file-test-latin1", "sft", raw={"test": b'name = "caf\xe9"\n'}, expect=("test.toml", "UTF-8")),
    Case("file-scenario-latin1", "sft", raw={"scenario": b'name = "x\xff"\n'}, expect=("scenario.toml", "UTF-8")),
    Case("file-system-latin1", "sft", raw={"system": b'name = "\xfe"\n'}, expect=("system.toml", "UTF-8")),
    Case("file-test-not-toml", "sft", raw={"test": b"name = \n"}, expect=("test.toml", "TOML")),
    Case("file-scenario-not-toml", "sft", raw={"scenario": b"[[Tests]\n"}, expect=("scenario.toml", "TOML")),
    Case("file-system-not-toml", "sft", raw={"system": b"{}\n"}, expect=("system.toml", "TOML")),
    Case("file-test-empty", "sft", raw={"test": b""}, expect=("test.toml",)),
    Case("file-scenario-empty", "sft", raw={"scenario": b""}, expect=("scenario.toml",)),
    Case("file-system-empty", "sft", raw={"system": b""}, expect=("system.toml",)),
    Case("file-test-binary", "sft", raw={"test": bytes(range(256))}, expect=("test.toml",)),
    Case("file-test-bom", "sft", raw={"test": b"\xef\xbb\xbfname = 1\n"}, expect=("test.toml",)),
    Case("file-test-nul", "sft", raw={"test": b'name = "a"\x00\n'}, expect=("test.toml",)),
    Case("file-test-deep-nesting", "sft", raw={"test": b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n"},
         expect=("test.toml",)),
]

COMMAND_LINES = [
    Case("cli-system-missing", "sft", argv=("dry-run", "--system-config", "{conf}/nope.toml", "--test-scenario",
                                            "{scenario}", "--output-dir", "{out}"), expect=("nope.toml",),
         verbs=("dry-run",)),
    Case("cli-scenario-missing", "sft", argv=("dry-run", "--system-config", "{system}", "--test-scenario",
                                              "{conf}/nope.toml", "--output-dir", "{out}"), expect=("nope.toml",),
         verbs=("dry-run",)),
    Case("cli-system-is-dir", "sft", argv=("dry-run", "--system-config", "{conf}", "--test-scenario", "{scenario}",
                                           "--output-dir", "{out}"), expect=("system-config",), verbs=("dry-run",)),
    Case("cli-output-is-file", "sft", argv=("dry-run", "--system-config", "{system}", "--test-scenario",
                                            "{scenario}", "--output-dir", "{system}"), expect=("output",),
         verbs=("dry-run",)),
    Case("cli-unknown-option", "sft", argv=("dry-run", "--sytem-config", "{system}"), expect=("--sytem-config",),
         verbs=("dry-run",)),
    Case("cli-unknown-verb", "sft", argv=("dryrun",), expect=("dryrun",), verbs=("dry-run",)),
    Case("cli-tests-dir-file", "sft", argv=("dry-run", "--system-config", "{system}", "--test-scenario",
                                            "{scenario}", "--tests-dir", "{test}", "--output-dir", "{out}"),
         expect=("tests-dir",), verbs=("dry-run",)),
    Case("cli-scenario-is-test", "sft", argv=("dry-run", "--system-config", "{system}", "--test-scenario", "{test}",
                                              "--output-dir", "{out}"), expect=("test.toml",), verbs=("dry-run",)),
    Case("cli-system-is-scenario", "sft", argv=("dry-run", "--system-config", "{scenario}", "--test-scenario",
                                                "{scenario}", "--output-dir", "{out}"), expect=("scenario.toml",),
         verbs=("dry-run",)),
    Case("cli-report-missing-dir", "sft", argv=("generate-report", "--system-config", "{system}", "--test-scenario",
                                                "{scenario}", "--result-dir", "{out}/nope"), expect=("nope",),
         verbs=("dry-run",)),
    Case("cli-report-empty-dir", "sft", argv=("generate-report", "--system-config", "{system}", "--test-scenario",
                                              "{scenario}", "--result-dir", "{home}"), expect=("home",),
         verbs=("dry-run",)),
    Case("cli-verify-missing", "sft", argv=("verify-configs", "{conf}/nope"), expect=("nope",), verbs=("dry-run",)),
    Case("cli-preflight-missing-system", "sft", argv=("preflight", "--system-config", "{conf}/nope.toml",
                                                      "--test-scenario", "{scenario}"), expect=("nope.toml",),
         verbs=("dry-run",)),
    Case("cli-log-level-bogus", "sft", argv=("--log-level", "loud", "dry-run"), expect=("loud",),
         verbs=("dry-run",)),
]

VALID = [
    Case("valid-sft", "sft", ok=True),
    # accepted on purpose: CloudAI's abbreviated time limits; a system's environment values written as TOML numbers
    # (CloudAI's system model takes them and they are exported as text; a test's must be strings: train-env-int)
    Case("valid-time-limit-2h", "sft", {S0 + "time_limit": "2h"}, ok=True),
    Case("valid-env-int", "sft", {ENV + "NCCL_DEBUG": 5}, ok=True),
    Case("valid-env-tokenizers", "sft", {"test.extra_env_vars": {"TOKENIZERS_PARALLELISM": "false"}}, ok=True),
    Case("valid-hf-path", "sft", {T + "hf_model_id": "/fsx/models/Kimi-K2-Base"}, ok=True),
    Case("valid-ab", "ab", ok=True),
    Case("valid-refit", "refit", ok=True),
    Case("valid-k8s", "k8s", ok=True),
    # a secret in a test's description is redacted where it is read (nothing runs it): accepted, and never shown
    Case("valid-description-token-redacted", "sft", {"test.description": f"SFT; hub token {HF}"}, ok=True, secret=HF),
    Case("valid-golden-file", "sft", {T + "golden_values": "golden.json"}, ok=True, files={"golden.json": _LOSS}),
    Case("valid-hf-config-dir", "sft", {T + "hf_config_dir": "{work}/hfc"}, ok=True,
         files={"hfc/config.json": _CONFIG, "hfc/modeling_x.py": b"# custom code\n"}),
    Case("valid-refit-seq-length-default", "refit", {T + "seq_length": DELETE}, ok=True),
    Case("valid-srun-env-reference", "sft", {S0 + "extra_srun_args": "--export=ALL,HF_TOKEN=$HF_TOKEN"}, ok=True),
    # issue 32: what the script can carry is carried (quoted), not refused
    Case("valid-scenario-name-space", "sft", {"scenario.name": "kimi k2 sft"}, ok=True),
    Case("valid-test-id-space", "sft", {S0 + "id": "sft run"}, ok=True),
    Case("valid-sbatch-comment-words", "sft", {SYS + "extra_sbatch_args": ['--comment=two words, "quoted" #1']},
         ok=True),
    Case("valid-sbatch-exclusive", "sft", {SYS + "extra_sbatch_args": ["--exclusive", "-Cgpu", "--constraint=gpu"]},
         ok=True),
    Case("valid-env-value-shell-characters", "sft", {ENV + "MY_FLAGS": "a b $(rm -rf /) `x` 'y' \\ ;"}, ok=True),
    Case("valid-nodes-list", "sft", {S0 + "nodes": ["node[001-032]"]}, ok=True),
    Case("valid-exclude-nodes", "sft", {S0 + "exclude_nodes": ["node[001-002]"]}, ok=True),
]


def _test(tid: str, *deps: str) -> dict:
    return {"id": tid, "test_name": "kimi_k2_sft", "num_nodes": 32, "time_limit": "01:00:00",
            "dependencies": [{"type": "end_post_comp", "id": d} for d in deps]}


# Issue 26: dependency cycles are refused, naming the cycle (CloudAI refuses only a test that depends on itself).
CYCLES = [
    Case("scn-dependency-cycle-2", "sft", {"scenario.Tests": [_test("a", "b"), _test("b", "a")]},
         ("dependencies", "'a' -> 'b' -> 'a'")),
    Case("scn-dependency-cycle-3", "sft", {"scenario.Tests": [_test("a", "b"), _test("b", "c"), _test("c", "a")]},
         ("dependencies", "'a' -> 'b' -> 'c' -> 'a'")),
    Case("scn-dependency-cycle-behind-a-chain", "sft", {"scenario.Tests": [
        _test("start", "b"), _test("b", "c"), _test("c", "d"), _test("d", "b")]}, ("'b' -> 'c' -> 'd' -> 'b'",)),
    Case("scn-dependency-self", "sft", {"scenario.Tests": [_test("a", "a")]}, ("dependencies", "'a' -> 'a'")),
]

_TOML_SOURCES = {
    "test": (CONF / "test" / "kimi_k2_sft.toml").read_bytes(),
    "scenario": (CONF / "test_scenario" / "kimi_k2_sft.toml").read_bytes(),
    "system": (CONF / "system" / "slurm_b300_efa.toml").read_bytes(),
}
# Every shape of deep TOML: nested table headers, a dotted key, arrays of arrays, inline tables; just past the limit
# (32) and far past it (where the parser itself, or what reads its tables next, runs out of stack).
_DEEP = {
    "headers-2000": b"\n[" + b".".join([b"a"] * 2000) + b"]\nx = 1\n",
    "dotted-key-3000": b"zz" + b".a" * 3000 + b" = 1\n",
    "arrays-40": b"zz = " + b"[" * 40 + b"]" * 40 + b"\n",
    "arrays-900": b"zz = " + b"[" * 900 + b"]" * 900 + b"\n",
    "inline-tables-40": b"zz = " + b"{a = " * 40 + b"1" + b"}" * 40 + b"\n",
    "inline-tables-5000": b"zz = " + b"{a = " * 5000 + b"1" + b"}" * 5000 + b"\n",
}
DEEP_TOML = [
    Case(f"file-{which}-deep-{shape}", "sft", expect=(f"{which}.toml", "nested"),
         raw={which: src + extra if shape.startswith("headers") else extra + src})
    for which, src in _TOML_SOURCES.items() for shape, extra in _DEEP.items()
] + [
    # generate-report from a results folder alone reads the system and scenario `run` kept there: checked the same way
    Case("cli-report-kept-system-deep", "sft", argv=("generate-report", "--result-dir", "{work}/res"),
         files={"res/mbridge_inputs/system/s.toml": _TOML_SOURCES["system"] + _DEEP["headers-2000"],
                "res/mbridge_inputs/test_scenario/s.toml": _TOML_SOURCES["scenario"],
                "res/mbridge_inputs/test/t.toml": _SFT},
         expect=("s.toml", "nested"), verbs=("dry-run",)),
]

# Issue 26: secrets in free text. Names and ids are refused; so is every other field a job is written from (srun and
# sbatch arguments, mounts, URLs): neither the value nor a redacted copy may reach the job's files.
FREE_TEXT_SECRETS = [
    Case("scn-srun-token", "sft", {S0 + "extra_srun_args": f"--comment={HF}"}, ("extra_srun_args",), secret=HF),
    Case("scn-srun-aws-secret-by-name", "sft", {S0 + "extra_srun_args": f"--export=ALL,AWS_SECRET_ACCESS_KEY={AWS}"},
         ("extra_srun_args",), secret=AWS),
    Case("scn-name-token", "sft", {"scenario.name": f"bench-{HF}"}, ("scenario name",), secret=HF),
    Case("scn-id-token", "sft", {S0 + "id": f"run{HF}"}, ("id",), secret=HF),
    Case("scn-test-name-token", "sft", {"test.name": f"sft{HF}", S0 + "test_name": f"sft{HF}"}, ("name",),
         secret=HF),
    Case("sys-srun-url-password", "sft", {SYS + "extra_srun_args": f"--comment=https://bot:{PASSWORD}@git.example/x"},
         ("extra_srun_args", "password"), secret=PASSWORD),
    Case("sys-sbatch-token", "sft", {SYS + "extra_sbatch_args": [f"--comment={HF}"]}, ("extra_sbatch_args",),
         secret=HF),
    Case("sys-env-random-value", "sft", {ENV + "MY_SETTING": RANDOM}, ("MY_SETTING",), secret=RANDOM),
    Case("sys-env-hf-tkn", "sft", {ENV + "HF_TKN": "Xy7pLm2Qz"}, ("HF_TKN",), secret="Xy7pLm2Qz"),
    Case("train-mount-token", "sft", {"test.extra_container_mounts": [f"/fsx/{HF}:/data"]},
         ("extra_container_mounts",), secret=HF),
    Case("train-git-url-password", "sft", {"test.git_repos": [{"url": f"https://bot:{PASSWORD}@github.com/a/b.git",
                                                                "commit": "0123abc"}]}, ("git_repos",),
         secret=PASSWORD),
    Case("train-data-url-password", "sft", {T + "data": f"https://bot:{PASSWORD}@data.example/sft"}, ("data",),
         secret=PASSWORD),
    # a credential word glued to the name before it, or a short one as a whole word; a URL password holding '
    *[Case(f"sys-env-name-{name.lower()}", "sft", {ENV + name: "hunter2correct"}, (name,), secret="hunter2correct")
      for name in ("PGPASSWORD", "SMTPPASSWORD", "WANDBAPIKEY", "MYSQL_PWD", "PASS", "LOGIN_CREDENTIAL")],
    # a value that is no text: the job would export Python's rendering of it (True, 1000.0, {'a': 1})
    *[Case(f"sys-env-{kind}-value", "sft", {ENV + "NCCL_SETTING": value}, ("NCCL_SETTING", kind))
      for kind, value in (("boolean", True), ("float", 1e3), ("table", {"a": 1}), ("list", [1, 2]))],
    Case("sys-env-url-password-quote", "sft", {ENV + "REPO_URL": "https://bot:Pa55'w0rdXyz@git.example/x"},
         ("REPO_URL",), secret="Pa55'w0rdXyz"),
]

# Issue 26: the golden-values file a training test names is refused at dry-run when it is missing or cannot be used;
# reading it never hangs (a FIFO, 50 MB) nor recurses without end (100k deep).
GOLDEN = [
    Case("golden-missing", "sft", {T + "golden_values": "golden/nope.json"}, ("golden_values", "not found")),
    Case("golden-50mb", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "MiB"),
         files={"golden.json": Sparse(50 << 20)}),
    Case("golden-nested-100k", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "nested"),
         files={"golden.json": b"[" * 100_000 + b"]" * 100_000}),
    Case("golden-fifo", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "regular file"),
         files={"golden.json": FIFO}),
    Case("golden-a-folder", "sft", {T + "golden_values": "{work}/golden"}, ("golden_values", "regular file"),
         files={"golden/x": b""}),
    Case("golden-not-json", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "not JSON"),
         files={"golden.json": b"{not json"}),
    Case("golden-no-loss", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "lm loss"),
         files={"golden.json": b'{"0": {"elapsed time per iteration (ms)": 5.0}}'}),
    Case("golden-step-holds-a-table", "sft", {T + "golden_values": "golden.json"}, ("golden_values", "format"),
         files={"golden.json": b'{"0": {"lm loss": {"a": [1]}}}'}),
]

# Issue 26: what the payload copies from hf_config_dir: only the folder's own regular files, within size limits, and a
# config.json that is a model config (checked at dry-run where this machine sees the folder, and on the cluster).
MODEL_CONFIG = [
    Case("hfcfg-config-links-out", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "outside"),
         files={"hfc/config.json": Link("/etc/passwd")}),
    Case("hfcfg-code-links-out", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "outside"),
         files={"hfc/config.json": _CONFIG, "hfc/modeling_x.py": Link("/etc/hostname")}),
    Case("hfcfg-config-fifo", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "regular file"),
         files={"hfc/config.json": FIFO}),
    Case("hfcfg-not-a-model-config", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "model config"),
         files={"hfc/config.json": b'{"root": "x"}'}),
    Case("hfcfg-config-nested-100k", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "nested"),
         files={"hfc/config.json": b"[" * 100_000 + b"]" * 100_000}),
    Case("hfcfg-file-too-large", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "MiB"),
         files={"hfc/config.json": _CONFIG, "hfc/tokenizer.json": Sparse(40 << 20)}),
    Case("hfcfg-no-config", "sft", {T + "hf_config_dir": "{work}/hfc"}, ("hf_config_dir", "no config.json"),
         files={"hfc/README.md": b"x"}),
]

# Issue 26: refit sizes beyond the model, an A/B report field no run records.
LIMITS = [
    Case("refit-seq_length-beyond-model", "refit", {T + "seq_length": 513}, ("seq_length", "512")),
    Case("refit-num_layers-beyond-model", "refit", {T + "num_layers": 1_000_000}, ("num_layers", "1000000")),
    Case("ab-report-field-unknown", "ab", {"scenario.reports": {"mbridge_ab": {"field": "nonexistent_field"}}},
         ("field", "nonexistent_field")),
    Case("k8s-credentials-raw-token", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_CREDENTIALS": RAW}, ("CREDENTIALS",),
         secret=RAW),
]


_SYSTEM_B300 = (CONF / "system" / "slurm_b300_efa.toml").read_bytes()


def _env_raw(escaped: bytes) -> bytes:
    """The b300 system with one more global environment value, written as a TOML escape by hand (the toml package
    turns "\x00" into "x00")."""
    assert b"[global_env_vars]\n" in _SYSTEM_B300
    return _SYSTEM_B300.replace(b"[global_env_vars]\n", b'[global_env_vars]\nMY_SETTING = "' + escaped + b'"\n', 1)


_OUT_ARGV = ("dry-run", "--system-config", "{system}", "--test-scenario", "{scenario}", "--output-dir")

# Issue 32: every field that reaches an #SBATCH line or the script body, by the way sbatch (or the shell) would read
# it otherwise. sbatch splits an #SBATCH line into words at whitespace, drops quotes and '\', ends it at '#', starts
# a heterogeneous-job component at "hetjob"/"packjob" (src/sbatch/opt.c); --output is a filename pattern ('%j',
# '%x', '%t'; a '\' turns the patterns off). Each value is refused at dry-run, naming the field and the value.
SBATCH_DIRECTIVES = [
    Case("sys-account-injected-options", "sft", {SYS + "account": "acct --output=/tmp/x.txt --chdir=/etc"},
         ("account", "acct --output=/tmp/x.txt --chdir=/etc")),
    Case("sys-account-quoted", "sft", {SYS + "account": 'acct" --chdir="/etc'}, ("account",)),
    Case("sys-account-hash", "sft", {SYS + "account": "acct#x"}, ("account", "acct#x")),
    Case("sys-partition-injected-options", "sft", {SYS + "default_partition": "b300 --chdir=/etc",
                                                   "system.partitions.0.name": "b300 --chdir=/etc"}, ("partition",)),
    Case("scn-time-limit-injected-option", "sft", {S0 + "time_limit": "01:00:00 --chdir=/etc"}, ("time_limit",)),
    Case("sys-sbatch-two-words", "sft", {SYS + "extra_sbatch_args": ["hello world"]},
         ("extra_sbatch_args", "hello world")),
    Case("sys-sbatch-value-separate", "sft", {SYS + "extra_sbatch_args": ["--constraint gpu"]},
         ("extra_sbatch_args", "--constraint gpu")),
    Case("sys-sbatch-output-override", "sft", {SYS + "extra_sbatch_args": ["--output=/tmp/x.txt"]},
         ("extra_sbatch_args", "--output")),
    Case("sys-sbatch-output-abbreviated", "sft", {SYS + "extra_sbatch_args": ["--outp=/tmp/x.txt"]},
         ("extra_sbatch_args", "--outp")),
    Case("sys-sbatch-chdir-short", "sft", {SYS + "extra_sbatch_args": ["-D/etc"]}, ("extra_sbatch_args", "-D")),
    Case("sys-sbatch-chdir-cluster", "sft", {SYS + "extra_sbatch_args": ["-HD/etc"]}, ("extra_sbatch_args",)),
    Case("sys-sbatch-het-separator", "sft", {SYS + "extra_sbatch_args": ["--comment=a-HetJob-b"]},
         ("extra_sbatch_args", "HetJob")),
    Case("sys-sbatch-value-in-next-element", "sft", {SYS + "extra_sbatch_args": ["--comment", "--exclusive"]},
         ("extra_sbatch_args", "--comment")),
    Case("sys-sbatch-short-value-in-next-element", "sft", {SYS + "extra_sbatch_args": ["-C", "gpu"]},
         ("extra_sbatch_args", "-C")),
    Case("sys-sbatch-not-an-option", "sft", {SYS + "extra_sbatch_args": ["exclusive"]}, ("extra_sbatch_args",)),
]

FILENAME_PATTERNS = [
    Case("scn-name-percent-j", "sft", {"scenario.name": "bench-%j"}, ("scenario name", "bench-%j")),
    Case("scn-name-percent-x", "sft", {"scenario.name": "a%xb"}, ("scenario name", "%")),
    Case("scn-id-percent-t", "sft", {S0 + "id": "run%t"}, ("test id", "run%t")),
    Case("scn-name-backslash", "sft", {"scenario.name": "a\\b"}, ("scenario name",)),
    Case("cli-output-dir-percent", "sft", argv=(*_OUT_ARGV, "{work}/out-%j"), expect=("--output-dir", "%"),
         verbs=("dry-run",)),
    Case("cli-output-dir-percent-space", "sft", argv=(*_OUT_ARGV, "{work}/out %x"), expect=("--output-dir", "%"),
         verbs=("dry-run",)),
    Case("cli-output-dir-backslash", "sft", argv=(*_OUT_ARGV, "{work}/out\\dir"), expect=("--output-dir", "\\\\"),
         verbs=("dry-run",)),
    Case("cli-output-dir-het-separator", "sft", argv=(*_OUT_ARGV, "{work}/hetjob-results"),
         expect=("--output-dir", "hetjob"), verbs=("dry-run",)),
    Case("cli-output-dir-comma-container", "sft", argv=(*_OUT_ARGV, "{work}/a,b"), expect=("--output-dir", "','"),
         verbs=("dry-run",)),
]

CONTROL_CHARACTERS = [
    Case("sys-env-cr", "sft", {ENV + "MY_SETTING": "a\rb"}, ("MY_SETTING",)),
    Case("sys-env-nul", "sft", raw={"system": _env_raw(b"a\\u0000b")}, expect=("MY_SETTING",)),
    Case("train-env-cr", "sft", {"test.extra_env_vars": {"MY_SETTING": "x\ry"}}, ("MY_SETTING",)),
    Case("sys-account-cr", "sft", {SYS + "account": "acct\r--chdir=/etc"}, ("account",)),
    Case("sys-account-tab", "sft", {SYS + "account": "acct\t--chdir=/etc"}, ("account",)),
    Case("sys-sbatch-cr", "sft", {SYS + "extra_sbatch_args": ["--comment=a\rb"]}, ("extra_sbatch_args",)),
    Case("scn-id-tab", "sft", {S0 + "id": "a\tb"}, ("test id",)),
    Case("scn-name-cr", "sft", {"scenario.name": "a\rb"}, ("scenario name",)),
    Case("cli-output-dir-cr", "sft", argv=(*_OUT_ARGV, "{work}/out\rdir"), expect=("--output-dir",),
         verbs=("dry-run",)),
]

NODE_LISTS = [
    Case("scn-nodes-injected-option", "sft", {S0 + "nodes": ["node1 --chdir=/etc"]}, ("nodes",)),
    Case("scn-nodes-hash", "sft", {S0 + "nodes": ["node#1"]}, ("nodes",)),
    Case("scn-exclude-injected-option", "sft", {S0 + "exclude_nodes": ["node1 --chdir=/etc"]}, ("exclude_nodes",)),
    Case("scn-exclude-quote", "sft", {S0 + "exclude_nodes": ['node"1']}, ("exclude_nodes",)),
    # issue 46: names sbatch would refuse ("Invalid node name specified"), refused as hostlists before they reach it
    Case("scn-nodes-at-sign", "sft", {S0 + "nodes": ["gpu@1"]}, ("nodes[0]", "'@'")),
    Case("scn-nodes-open-range", "sft", {S0 + "nodes": ["gpu[1-"]}, ("nodes[0]", "prefix[ranges]")),
    Case("scn-nodes-huge-range", "sft", {S0 + "nodes": ["gpu[0-999999999999]"]}, ("nodes[0]", "100000 nodes")),
    Case("scn-exclude-non-ascii", "sft", {S0 + "exclude_nodes": ["gpü1"]}, ("exclude_nodes[0]", "'ü'")),
]

# Issue 46: counts far outside their physical range, refused naming the range
PHYSICAL_RANGES = [
    Case("train-train_iters-1e9", "sft", {T + "train_iters": 10**9}, ("train_iters", "from 1 to 10000000")),
    Case("train-seq_length-1e12", "sft", {T + "seq_length": 10**12}, ("seq_length", "from 1 to 16777216")),
    Case("train-gbs-1e9", "sft", {T + "gbs": 10**9}, ("gbs", "from 1 to 4194304")),
    Case("refit-iterations-1e7", "refit", {T + "iterations": 10**7}, ("iterations", "from 1 to 100000")),
    Case("refit-coalesce_mib-1e9", "refit", {T + "coalesce_mib": 10**9}, ("coalesce_mib", "from 0 to 1048576")),
]

# Issue 32: values beyond what the Kubernetes API server (or the container's execve) takes, refused at dry-run in one
# line that names the field, shows the value (cut, with its size, when long) and the fix.
KT = ENV + "CLOUDAI_MBRIDGE_K8S_"
_TOL = KT + "TOLERATIONS"
_BIG = "x" * (2 << 20)  # 2 MiB


def _tol_seconds(seconds: int, effect: str = "NoExecute") -> str:
    return f'[{{"key": "k", "operator": "Exists", "effect": "{effect}", "tolerationSeconds": {seconds}}}]'


K8S_LIMITS = [
    Case("k8s-env-value-2mib", "k8s", {ENV + "BIG": _BIG}, ("global_env_vars.BIG", "2097152 bytes", "E2BIG")),
    Case("k8s-test-env-value-200k", "k8s", {"test.extra_env_vars": {"BIG_T": "y" * 200_000}},
         ("extra_env_vars.BIG_T", "200000 bytes", "E2BIG")),
    Case("k8s-env-values-over-etcd", "k8s", {ENV + f"V{i}": "x" * 120_000 for i in range(13)},
         ("Job", "etcd", "global_env_vars")),
    Case("k8s-env-name-dotdot", "k8s", {"test.extra_env_vars": {"..x": "1"}}, ("..x", "environment variable name")),
    # issue 46: Secret keys and label keys the API server refuses (apirules.py)
    Case("k8s-secret-key-dotdot", "k8s", {KT + "CREDENTIALS": '{"HF_TOKEN": "hf-token:..data"}'},
         ("CREDENTIALS", "not a valid Secret key", "'..'")),
    Case("k8s-secret-key-dot", "k8s", {KT + "CREDENTIALS": '{"HF_TOKEN": "hf-token:."}'},
         ("CREDENTIALS", "not a valid Secret key")),
    Case("k8s-node-selector-empty-prefix", "k8s", {KT + "NODE_SELECTOR": '{"/zone": "a"}'},
         ("NODE_SELECTOR", "prefix part must be non-empty")),
    Case("k8s-toleration-seconds-2pow63", "k8s", {_TOL: _tol_seconds(2**63)},
         ("tolerationSeconds", "9223372036854775808", "int64")),
    Case("k8s-toleration-seconds-below-int64", "k8s", {_TOL: _tol_seconds(-(2**63) - 1)},
         ("tolerationSeconds", "int64")),
    Case("k8s-toleration-seconds-not-noexecute", "k8s", {_TOL: _tol_seconds(30, "NoSchedule")},
         ("tolerationSeconds", "NoExecute")),
    Case("k8s-toleration-value-64", "k8s", {_TOL: '[{"key": "k", "value": "' + "v" * 64 + '"}]'},
         ("TOLERATIONS[0].value", "63")),
    Case("k8s-toleration-key-bad", "k8s", {_TOL: '[{"key": "y y", "operator": "Exists"}]'}, ("TOLERATIONS[0].key",)),
    Case("k8s-toleration-no-key-equal", "k8s", {_TOL: '[{"operator": "Equal", "value": "N"}]'},
         ("TOLERATIONS[0].operator", "Exists")),
    Case("k8s-namespace-64", "k8s", {SYS + "default_namespace": "a" * 64}, ("namespace",)),
    Case("k8s-pvc-254", "k8s", {KT + "RESULTS_PVC": "a" * 254}, ("RESULTS_PVC",)),
    Case("k8s-node-selector-value-64", "k8s", {KT + "NODE_SELECTOR": '{"y": "' + "v" * 64 + '"}'},
         ("NODE_SELECTOR",)),
    Case("k8s-time-limit-beyond-int64", "k8s", {S0 + "time_limit": "9" * 30}, ("time_limit",)),
]

# Issue 32: values a plain YAML 1.1 scalar would type (kubectl's go-yaml v2 reads y / N / on / ~ / 0777 / 1_000 / 1e3 /
# .inf / 2001-12-14 as booleans, null, numbers, timestamps): accepted, and every manifest must read back as
# objects.json says (test_hostile_inputs.manifest_mismatches; summary.py counts the rows where it does not).
_TYPED = ["y", "Y", "n", "N", "yes", "No", "ON", "off", "True", "FALSE", "~", "null", "NULL", "", "1e3", "0777",
          "0o17", "0x1F", "1_000", "-1", ".5", ".inf", "-.Inf", ".nan", "1:20", "2001-12-14", "2001-12-14 21:59:43.10",
          "2001-12-14t21:59:43.10-05:00", "<<", "=", "9223372036854775808", "0b101"]
_TYPED_NAMES = {
    SYS + "default_namespace": "y", KT + "RESULTS_PVC": "on", KT + "MOUNTS": '{"/fsx": "0777"}',
    KT + "SERVICE_ACCOUNT": "no", KT + "SCHEDULER_NAME": "true", KT + "PRIORITY_CLASS": "null",
    KT + "CREDENTIALS": '{"HF_TOKEN": "y:n"}', KT + "NODE_SELECTOR": '{"y": "N", "on": "1_000", "n": "2001-12-14"}',
    KT + "TOLERATIONS": '[{"key": "y", "operator": "Equal", "value": "N", "effect": "NoSchedule"}, '
                        '{"key": "off", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}]',
    KT + "SHM_SIZE": "1000",
}
K8S_YAML = [
    Case("valid-k8s-env-values-yaml11", "k8s", {ENV + f"V_{i}": v for i, v in enumerate(_TYPED)}, ok=True),
    Case("valid-k8s-test-env-values-yaml11", "k8s", {"test.extra_env_vars": {f"T_{i}": v for i, v in
                                                                            enumerate(_TYPED)}}, ok=True),
    Case("valid-k8s-env-names-yaml11", "k8s", {ENV + "y": "N", ENV + "N": "y", ENV + "ON": "1e3"}, ok=True),
    Case("valid-k8s-names-yaml11", "k8s", _TYPED_NAMES, ok=True),
    Case("valid-k8s-names-yaml11-pytorchjob", "k8s", {**_TYPED_NAMES, KT + "KIND": "pytorchjob"}, ok=True),
    Case("valid-k8s-toleration-seconds-int64-max", "k8s", {_TOL: _tol_seconds(2**63 - 1)}, ok=True),
]
VALID += K8S_YAML


def _also_run(cases: list[Case]) -> list[Case]:
    """``run`` too: its refusal must come before CloudAI asks the cluster (sinfo), installs or submits anything."""
    return [dataclasses.replace(c, verbs=(*c.verbs, "run")) for c in cases]


# Issue 32: inputs that hang or eat memory (a FIFO, a device, a huge sparse file where a config or a results file
# belongs: refused before CloudAI or the reports open it, naming the file and what it is); a variable whose NAME is a
# token; pathological lengths that made the redaction backtrack for minutes (valid: accepted, in seconds).
def _config_path_rows() -> list[Case]:
    rows = []
    kinds = {"fifo": (FIFO, "FIFO"), "sparse-20mb": (Sparse(20 << 20), "too large")}
    for verb in ("dry-run", "preflight", "run"):
        out = ("--output-dir", "{out}") if verb != "preflight" else ()
        for label, (content, what) in kinds.items():
            rows.append(Case(f"file-system-{label}-{verb}", "sft", argv=(
                verb, "--system-config", "{work}/system.toml", "--test-scenario", "{scenario}", *out),
                expect=("system.toml", what), files={"system.toml": content}, verbs=(verb,)))
            rows.append(Case(f"file-scenario-{label}-{verb}", "sft", argv=(
                verb, "--system-config", "{system}", "--test-scenario", "{work}/scenario.toml", *out),
                expect=("scenario.toml", what), files={"scenario.toml": content}, verbs=(verb,)))
            rows.append(Case(f"file-test-{label}-{verb}", "sft", argv=(
                verb, "--system-config", "{system}", "--test-scenario", "{scenario}", "--tests-dir", "{work}/tests",
                *out), expect=("t.toml", what), files={"tests/t.toml": content}, verbs=(verb,)))
        rows.append(Case(f"file-system-dev-zero-{verb}", "sft", argv=(
            verb, "--system-config", "/dev/zero", "--test-scenario", "{scenario}", *out),
            expect=("/dev/zero", "character device"), verbs=(verb,)))
        rows.append(Case(f"file-scenario-link-to-dev-zero-{verb}", "sft", argv=(
            verb, "--system-config", "{system}", "--test-scenario", "{work}/scenario.toml", *out),
            expect=("scenario.toml", "character device"), files={"scenario.toml": Link("/dev/zero")}, verbs=(verb,)))
    for label, (content, what) in kinds.items():
        rows.append(Case(f"file-verify-folder-{label}", "sft", argv=("verify-configs", "{work}/configs"),
                         expect=("x.toml", what), files={"configs/x.toml": content}, verbs=("verify-configs",)))
    return rows


def _results_rows() -> list[Case]:
    """generate-report on a results folder holding a FIFO / device / huge file where the reports read."""
    run = "res/kimi_k2_sft/0/"
    files = {"rank-log-fifo": ("logs/rank-0.log", FIFO, "FIFO"),
             "rank-log-dev-zero": ("logs/rank-0.log", Link("/dev/zero"), "character device"),
             "rank-log-sparse-9gb": ("logs/rank-3.log", Sparse(9 << 30), "too large"),
             "config-fifo": ("mbridge_config.json", FIFO, "FIFO"),
             "config-dev-zero": ("mbridge_config.json", Link("/dev/zero"), "character device"),
             "config-sparse-100mb": ("mbridge_config.json", Sparse(100 << 20), "too large"),
             "test-run-toml-fifo": ("test-run.toml", FIFO, "FIFO"),
             "test-run-toml-sparse-100mb": ("test-run.toml", Sparse(100 << 20), "too large"),
             "stdout-fifo": ("stdout.txt", FIFO, "FIFO")}
    return [Case(f"results-{label}", "sft", argv=("generate-report", "--system-config", "{system}", "--test-scenario",
                                                 "{scenario}", "--result-dir", "{work}/res"),
                 expect=(rel.split("/")[-1], what), files={run + rel: content, run + "keep.txt": b"x\n"},
                 verbs=("generate-report",))
            for label, (rel, content, what) in files.items()]


ISSUE_32 = [
    *_config_path_rows(),
    *_results_rows(),
    Case("sys-env-name-hf-token", "sft", {ENV + HF: "1"}, ("global_env_vars",), secret=HF),
    Case("sys-env-name-aws-key-id", "sft", {ENV + "AKIAQ7ZXW3RT5YUV2MNB": "1"}, ("global_env_vars",),
         secret="AKIAQ7ZXW3RT5YUV2MNB"),
    Case("sys-env-name-wandb-key", "sft", {ENV + WANDB: "1"}, ("global_env_vars",), secret=WANDB),
    Case("test-env-name-hf-token", "sft", {"test.extra_env_vars": {HF: "1"}}, ("extra_env_vars",), secret=HF),
    Case("scn-env-name-hf-token", "sft", {S0 + "extra_env_vars": {HF: "1"}}, ("extra_env_vars",), secret=HF),
]
VALID += [
    Case("valid-description-24kb-hyphenated", "sft", {"test.description": "ab-" * 8000}, ok=True),
    Case("valid-test-name-100k", "sft", {"test.name": "n" * 100_000, S0 + "test_name": "n" * 100_000}, ok=True),
    Case("valid-scenario-name-hyphenated", "sft", {"scenario.name": "kimi-" * 40}, ok=True),
]


# Environment variable names bash or the launch reserve (launch/envnames.py), from each place a name comes from (the
# system's [global_env_vars], the test's and the scenario's extra_env_vars) and on each launcher: refused at dry-run
# in one line naming the table, the name and the fix.
_TENV = "test.extra_env_vars"
RESERVED_ENV_NAMES = [
    Case("sys-env-name-readonly-uid", "sft", {ENV + "UID": "1000"}, ("global_env_vars", "UID", "read-only")),
    Case("test-env-name-readonly-euid", "sft", {_TENV: {"EUID": "0"}}, ("extra_env_vars", "EUID", "read-only")),
    Case("scn-env-name-readonly-shellopts", "sft", {S0 + "extra_env_vars": {"SHELLOPTS": "xtrace"}},
         ("extra_env_vars", "SHELLOPTS")),
    Case("refit-env-name-readonly-bash-versinfo", "refit", {ENV + "BASH_VERSINFO": "5"}, ("BASH_VERSINFO",)),
    Case("sys-env-name-bash-env", "sft", {ENV + "BASH_ENV": "/tmp/x.sh"}, ("global_env_vars", "BASH_ENV")),
    Case("test-env-name-ifs", "sft", {_TENV: {"IFS": ","}}, ("extra_env_vars", "IFS")),
    Case("test-env-name-env", "sft", {_TENV: {"ENV": "/tmp/x.sh"}}, ("extra_env_vars", "ENV")),
    Case("sys-env-name-bash-prefix", "sft", {ENV + "BASH_XTRACEFD": "7"}, ("BASH_XTRACEFD",)),
    Case("sys-env-name-posixly-correct", "sft", {ENV + "POSIXLY_CORRECT": "1"}, ("POSIXLY_CORRECT",)),
    Case("sys-env-name-random", "sft", {ENV + "RANDOM": "4"}, ("global_env_vars", "RANDOM")),
    Case("test-env-name-pwd", "sft", {_TENV: {"PWD": "/tmp"}}, ("extra_env_vars", "PWD")),
    Case("sys-env-name-pythonhome", "sft", {ENV + "PYTHONHOME": "/usr"}, ("global_env_vars", "PYTHONHOME")),
    Case("test-env-name-master-addr", "sft", {_TENV: {"MASTER_ADDR": "10.0.0.1"}}, ("MASTER_ADDR",)),
    Case("k8s-env-name-readonly-uid", "k8s", {ENV + "UID": "1000"}, ("global_env_vars", "UID", "read-only")),
    Case("k8s-test-env-name-bash-env", "k8s", {_TENV: {"BASH_ENV": "/tmp/x.sh"}}, ("extra_env_vars", "BASH_ENV")),
]
VALID += [
    # a real need (NCCL plugins, profilers): exported as written
    Case("valid-env-name-ld-preload", "sft", {ENV + "LD_PRELOAD": "/opt/nccl-net/libnccl-net.so"}, ok=True),
    # kept behind the staged payload's folder (launch/slurm.py, launch/kubernetes/objects.py)
    Case("valid-env-name-pythonpath", "sft", {_TENV: {"PYTHONPATH": "/opt/extra"}}, ok=True),
    Case("valid-k8s-env-name-pythonpath", "k8s", {ENV + "PYTHONPATH": "/opt/extra"}, ok=True),
    Case("valid-env-name-lower-case-uid", "sft", {ENV + "uid": "1"}, ok=True),
]


# Characters that do not show (launch/invisible.py: bidi controls, zero-width and other format characters) in every
# field that reaches an #SBATCH line, the srun line or a Kubernetes name or label: refused at dry-run, the character
# shown as U+XXXX with its position.
_NS = '{"node.kubernetes.io/instance-type": "p6-b300.48xlarge\u202e"}'
INVISIBLE_CHARACTERS = [
    Case("sys-account-bidi-override", "sft", {SYS + "account": "acct\u202eevil"},
         ("account", "U+202E", "position 5")),
    Case("sys-account-rtl-mark", "sft", {SYS + "account": "\u200facct"}, ("account", "U+200F", "position 1")),
    Case("sys-partition-zero-width", "sft", {SYS + "default_partition": "b300\u200b",
                                             "system.partitions.0.name": "b300\u200b"},
         ("default_partition", "U+200B", "position 5")),
    Case("sys-sbatch-bom", "sft", {SYS + "extra_sbatch_args": ["--comment=a\ufeffb"]},
         ("extra_sbatch_args", "U+FEFF", "position 12")),
    Case("sys-sbatch-isolate", "sft", {SYS + "extra_sbatch_args": ["--exclusive", "--constraint=gpu\u2067"]},
         ("extra_sbatch_args", "U+2067")),
    Case("sys-srun-args-word-joiner", "sft", {SYS + "extra_srun_args": "--comment=x\u2060y"},
         ("extra_srun_args", "U+2060")),
    Case("scn-nodes-isolate", "sft", {S0 + "nodes": ["node\u20661"]}, ("nodes", "U+2066", "position 5")),
    Case("scn-exclude-arabic-mark", "sft", {S0 + "exclude_nodes": ["node\u061c2"]}, ("exclude_nodes", "U+061C")),
    Case("scn-time-limit-zero-width-joiner", "sft", {S0 + "time_limit": "01:00:00\u200d"},
         ("time_limit", "U+200D")),
    Case("scn-srun-args-embedding", "sft", {S0 + "extra_srun_args": "--comment=\u202ax"},
         ("extra_srun_args", "U+202A")),
    Case("refit-account-line-separator", "refit", {SYS + "account": "acct\u2028x"}, ("account", "U+2028")),
    Case("k8s-namespace-zero-width", "k8s", {"system.default_namespace": "mbridge\u200b"},
         ("default_namespace", "U+200B", "position 8")),
    Case("k8s-node-selector-bidi", "k8s", {ENV + "CLOUDAI_MBRIDGE_K8S_NODE_SELECTOR": _NS},
         ("NODE_SELECTOR", "U+202E")),
]


# The table by class of input (summary.py prints each class's counts).
CLASSES: dict[str, list[Case]] = {
    "training ints": _train_ints(), "training floats": _train_floats(), "refit ints": _refit_ints(),
    "choices and fields": CHOICES,
    "sweeps": _also_run(SWEEPS), "scenarios": _also_run(SCENARIOS), "dependency cycles": _also_run(CYCLES),
    "systems": _also_run(SYSTEMS), "kubernetes": K8S, "files": FILES, "deep TOML": DEEP_TOML,
    "secrets in free text": _also_run(FREE_TEXT_SECRETS), "golden files": GOLDEN, "model config folders": MODEL_CONFIG,
    "limits": LIMITS, "command lines": COMMAND_LINES, "unreadable files, names that are tokens (issue 32)": ISSUE_32,
    "sbatch directives": _also_run(SBATCH_DIRECTIVES), "filename patterns": FILENAME_PATTERNS,
    "control characters": CONTROL_CHARACTERS, "node lists": NODE_LISTS, "kubernetes API limits": K8S_LIMITS,
    "reserved env names": RESERVED_ENV_NAMES, "invisible characters": INVISIBLE_CHARACTERS,
    "physical ranges (issue 46)": PHYSICAL_RANGES,
}
CASES = [c for rows in CLASSES.values() for c in rows]
