"""Benchmarks, one module per capability. Each module has ``run() -> list[dict]``; every dict
is one figure, e.g. {"name": "policy.sample_chunks_per_s", "value": 123.4, "unit": "chunks/s",
...extra context}. ``scripts/bench.py`` prints one JSON line per figure (``run_benches``; a
bench's name is its module's). The modules:

``policy.py``        sampled action chunks/s, the log-prob pass, fused vs eager ops.
``world_model.py``   the world-model env's chunk_step frames/s and where its time goes.
``reward.py``        frames scored per second by the reward models.
``sim.py``           the simulators' render and step cost, the expert's success vs noise.
``eval.py``          simulator evaluation episodes/s, policy and simulator time apart.
``placement.py``     GRPO step wall time per placement mode (the real trainer, Ray actors).
``weight_sync.py``   weight-sync bandwidth to Ray actors, against memcpy.
``strategies.py``    hybrid vs full shard step time, offload + onload seconds per GB.
``lora.py``          what a weight sync, a checkpoint and a GRPO update cost with LoRA vs without.
``finetune.py``      a world-model fine-tune step on CPU, full beside LoRA.
``lerobot.py``       LeRobot datasets decoded and written, frames/s.
``rlinf_import.py``  the RLinf importer's peak memory at the 5B's width, per shard size.
``tracing.py``       tracing's cost per span and per step.
``cpu_bf16.py``      CPU kernels in float32, bf16, and bf16 through float32 GEMMs (why the
                     full-size check runs that way)."""

import contextlib
import importlib
import json
import os
import pkgutil
import sys
import time


@contextlib.contextmanager
def stdout_to_stderr():
    """Point file descriptor 1 at stderr for the block: the fits' step lines, Ray's forwarded
    worker logs and child processes all write to the descriptor, not only to ``sys.stdout``."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a sys.stdout not on fd 1 (a capture)
            yield
    finally:
        sys.stdout.flush()  # what the block printed goes out before fd 1 is stdout again
        os.dup2(saved, 1)
        os.close(saved)


def run_benches(names: list[str]) -> int:
    """The benches ``names`` (none: every module here) in turn: their figures as JSON lines on
    stdout, and nothing else there (what a bench prints goes to stderr); a bench that raises is
    one ``<name>.error`` line and the rest still run. Exit code: 2 for an unknown name, 1 when
    a bench failed, else 0."""
    available = sorted(m.name for m in pkgutil.iter_modules(__path__))
    unknown = sorted(set(names) - set(available))
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {available}", file=sys.stderr)
        return 2
    failed = 0
    for name in names or available:
        t0 = time.perf_counter()
        try:
            with stdout_to_stderr():
                figures = importlib.import_module(f"{__name__}.{name}").run()
        except Exception as err:  # report and go on: one broken bench must not hide the rest
            print(json.dumps({"name": f"{name}.error", "error": repr(err)}), flush=True)
            failed += 1
            continue
        for fig in figures:
            print(json.dumps(fig), flush=True)
        print(json.dumps({"name": f"{name}.bench_wall_s",
                          "value": round(time.perf_counter() - t0, 2), "unit": "s"}), flush=True)
    return 1 if failed else 0
