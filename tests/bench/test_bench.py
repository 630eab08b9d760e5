"""Every benchmark in wmrl/bench runs at a tiny size and returns well-formed figures, so a bench
broken by a change elsewhere fails here rather than the next time someone runs
``scripts/bench.py``. The figures' values are not judged (speed is the machine's), only their
shape: a name under the module's own, a finite float, a unit."""

import importlib
import math
import pkgutil

import pytest

import wmrl.bench

# run() keyword arguments that shrink each bench to a few seconds (scripts/bench.py runs the
# defaults, the real sizes); a bench without an entry fails test_every_bench_has_a_tiny_size
TINY = {
    "cpu_bf16": {"channels": 4, "size": 8, "tokens": 4, "width": 32, "hidden": 32},
    "eval": {"episodes": 2, "num_envs": 2, "max_episode_steps": 8, "image_size": 32},
    "finetune": {"batch": 1, "steps": 1, "ranks": (4,), "image": 32, "episodes": 2, "length": 17,
                 "stream_passes": 1},
    "lerobot": {"episodes": 2, "length": 4, "size": 32, "resize": 16, "repeats": 1},
    "lora": {"batch": 2, "steps": 1, "warmup": 0, "ranks": (4,), "meta_7b": False},
    # one mode, the one with the fewest actors (each start imports torch and wmrl), and only
    # the run with overlap: the bench's code is the same for every mode and setting, the modes
    # and the overlap themselves are tests/rollout's
    "placement": {"steps": 1, "num_envs": 2, "group_size": 2, "max_episode_steps": 8,
                  "modes": (("collocated", 1),), "overrides": ("rollout.worker_threads=1",),
                  "compare_overlap": False},
    "policy": {"repeats": 1, "batch": 2, "rounds": 1},
    "reward": {"envs": 1, "chunk": 2, "real_image": 64, "repeats": (1, 1, 1)},
    "rlinf_import": {"layers": 1, "dim": 128, "ffn": 256, "shards_mib": (1,)},
    "sim": {"episodes_per_task": 1, "max_episode_steps": 8, "render_sizes": (32,),
            "render_calls": 2, "step_calls": 2,
            "skip_render": {"num_envs": 2, "sizes": (32,), "rounds": 1, "chunks_per_round": 1},
            "libero": {"size": 32, "rounds": 1, "chunks_per_round": 1}},
    "strategies": {"world": 2, "steps": 1, "warmup": 1, "layers": 1, "offload_features": 64},
    "tracing": {"spans_per_step": 10, "n": 100},
    "weight_sync": {"total_bytes": 8 << 20, "repeats": 1, "bucket_mb": 2.0},
    "world_model": {"num_envs": 1, "chunks": 1},
}
# Ray actors (placement: two Lightning fits) or several processes (strategies: gloo ranks,
# rlinf_import: a child per measurement)
SLOW = {"placement", "rlinf_import", "strategies", "weight_sync"}
RAY = {"placement", "weight_sync"}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: at these sizes a second thread only waits for the first (on a shared
    2-core machine, ~30x slower per small conv)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(wmrl.bench.__path__))


def check_figures(module: str, figures) -> None:
    """A non-empty list of {name, value, unit} dicts (extra context keys allowed), names under
    ``<module>.`` and unique; a figure the machine cannot measure says why instead
    ({name, skipped}), but at least one figure is measured."""
    assert isinstance(figures, list) and figures, figures
    names = [f.get("name") for f in figures]
    assert len(set(names)) == len(names), names
    measured = 0
    for fig in figures:
        assert isinstance(fig, dict), fig
        name = fig.get("name")
        assert isinstance(name, str) and name.startswith(f"{module}.") and \
            len(name) > len(module) + 1, fig
        if "skipped" in fig:
            assert isinstance(fig["skipped"], str) and fig["skipped"], fig
            assert "value" not in fig, fig
            continue
        assert isinstance(fig.get("value"), float) and math.isfinite(fig["value"]), fig
        assert isinstance(fig.get("unit"), str) and fig["unit"], fig
        measured += 1
    assert measured, figures


def test_every_bench_has_a_tiny_size():
    """A new module in wmrl/bench must come with its tiny size here (and so with a test)."""
    missing = sorted(set(available()) - set(TINY))
    stale = sorted(set(TINY) - set(available()))
    assert not missing and not stale, \
        f"benches without a tiny size (and test): {missing}; sizes of no bench: {stale}"


@pytest.mark.parametrize("module", [
    pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [], id=name)
    for name in sorted(TINY)])
def test_bench_runs_tiny(module, request):
    if module in RAY:
        request.getfixturevalue("ray_local")  # the file's Ray, as other Ray tests use
    figures = importlib.import_module(f"wmrl.bench.{module}").run(**TINY[module])
    check_figures(module, figures)
