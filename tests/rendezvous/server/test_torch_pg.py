"""Two torch 1.13 processes do init_process_group("gloo") with the agent store
served by ddp-rdzvd (as under torchrun with TORCHELASTIC_USE_AGENT_STORE),
then all_reduce (sum checked) and barrier."""
import os
import subprocess
import sys

from rdzvd_fixture import Rdzvd

WORLD = 2


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with Rdzvd() as d:
        procs = []
        for rank in range(WORLD):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(d.port),
                       TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
                       RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                       OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(here, "torch_pg_worker.py")], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            outs.append(out)
            print(out, end="")
        for rank, (p, out) in enumerate(zip(procs, outs)):
            assert p.returncode == 0, f"rank {rank} exited {p.returncode}"
            assert f"rank {rank} sum 3" in out, out
    print("gloo process group over ddp-rdzvd: all_reduce and barrier passed")


if __name__ == "__main__":
    main()
