"""Two CPU ranks of one script started at once, as a cluster's launcher (torchrun, SLURM) starts
them: Lightning's own re-launch of the script for rank 1 would wait for rank 0's imports first."""

from __future__ import annotations

import os
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_ranks(cmd: list[str], cwd, env: dict | None = None, timeout: int = 400) -> list[str]:
    """Run ``cmd`` as ranks 0 and 1 of a 2-process world (gloo on CPU); each rank's output.
    A rank that fails fails the test with the end of its output."""
    base = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()), WORLD_SIZE="2", NODE_RANK="0", **(env or {}))
    procs = [subprocess.Popen([str(c) for c in cmd], env=dict(base, LOCAL_RANK=str(r)), cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:  # one rank failing leaves the other waiting in a collective
            if p.poll() is None:
                p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out[-3000:]}"
    return outs
