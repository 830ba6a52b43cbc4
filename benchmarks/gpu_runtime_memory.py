"""Where the device memory outside torch's caching allocator comes from, stage by stage, on one process per GPU.

Method: ``torch.cuda.mem_get_info()`` used (total - free) minus ``torch.cuda.memory_reserved()`` after each setup
stage the training payload goes through (CUDA context, NCCL process group with eager init, its first collective,
Megatron-Core's parallel state with all its communicators, a first bf16 matmul), printed by rank 0; units MiB.
Run (GPU host, megatron-core importable): ``python3 benchmarks/gpu_runtime_memory.py [--gpus N] [--ep N] [--lazy]``
(``--lazy``: no ``device_id`` at ``init_process_group``, as the training payload does since this was measured).
Ends with ``RESULT runtime_outside_allocator_<stage>=<x> MiB`` lines. A host with fewer CUDA GPUs than ``--gpus`` (or
without megatron-core) gets one line and exit status 3 before any process starts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

MIB = 1 << 20


def worker(rank: int, world: int, ep: int, lazy: bool) -> None:
    import torch

    torch.cuda.set_device(rank)
    mode = "lazy" if lazy else "eager"

    def outside(stage: str) -> None:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        used = total - free
        if rank == 0:
            print(f"stage {stage:<22} used {used / MIB:9.1f}  reserved {torch.cuda.memory_reserved() / MIB:9.1f}  "
                  f"outside {(used - torch.cuda.memory_reserved()) / MIB:9.1f} MiB", flush=True)
            outside_mib = (used - torch.cuda.memory_reserved()) / MIB
            print(f"RESULT runtime_outside_allocator_{mode}_{stage}={outside_mib:.0f} MiB")

    torch.zeros(1, device="cuda")
    outside("cuda_context")
    # eager (device_id given): every later group gets its communicator at once; lazy: at its first collective
    eager = {} if lazy else {"device_id": torch.device("cuda", rank)}
    torch.distributed.init_process_group("nccl", rank=rank, world_size=world, **eager)
    outside("nccl_init")
    torch.distributed.barrier()
    outside("nccl_barrier")
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(expert_model_parallel_size=ep)
    outside("megatron_groups")
    torch.distributed.barrier()
    outside("megatron_barrier")
    x = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (x @ x).sum().item()
    outside("bf16_matmul")
    g = parallel_state.get_data_parallel_group()
    torch.distributed.all_reduce(x, group=g)
    outside("dp_allreduce")
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--ep", type=int, default=None)
    parser.add_argument("--lazy", action="store_true", help="init_process_group without device_id (the payload)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    ep = args.ep or args.gpus
    if args.worker is not None:
        worker(args.worker, args.gpus, ep, args.lazy)
        return 0
    from provenance import require_gpu  # benchmarks/ is sys.path[0] when the script runs

    require_gpu(__file__, args.gpus, ("megatron.core",))
    print(f"method: mem_get_info used - memory_reserved after each stage, rank 0 of {args.gpus}, ep {ep}, "
          f"{'lazy' if args.lazy else 'eager'} NCCL communicators; MiB",
          flush=True)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": os.environ.get("MASTER_PORT", "29533")}
    procs = [subprocess.Popen([sys.executable, __file__, "--gpus", str(args.gpus), "--ep", str(ep), "--worker",
                               str(r), *(["--lazy"] if args.lazy else [])], env=env) for r in range(args.gpus)]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
