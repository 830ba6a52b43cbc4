from cloudai_mbridge.payload.dist_env import resolve


def test_srun_step_wins_over_an_inherited_world_size() -> None:
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "MASTER_ADDR": "10.0.0.1",
        "SLURM_JOB_ID": "42",
    }
    d = resolve(env)
    assert (d.rank, d.world_size, d.local_rank, d.master_addr, d.master_port) == (3, 4, 1, "10.0.0.1", 20042)


def test_torchrun_wins_inside_slurm() -> None:
    env = {
        "TORCHELASTIC_RUN_ID": "x",
        "RANK": "9",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "MASTER_PORT": "29500",
    }
    d = resolve(env)
    assert (d.rank, d.world_size, d.local_rank, d.master_port) == (9, 16, 1, 29500)


def test_plain_environment_and_default() -> None:
    assert resolve({"RANK": "2", "WORLD_SIZE": "4"}).rank == 2
    d = resolve({})
    assert (d.rank, d.world_size, d.master_addr) == (0, 1, "127.0.0.1")
