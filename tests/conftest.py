import atexit
import os
import shutil
import sys
import tempfile

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)
CONF_DIR = os.path.join(ROOT, "conf")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Ray >= 2.5x turns token auth on for a new local cluster and, on a machine without
# ~/.ray/auth_token (a fresh CI machine), writes a new token there: two pytest workers starting
# their clusters at once can each write their own, and a process of one cluster then reads the
# other's. The tests' clusters are local and short-lived: no token (Ray's documented opt-out).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# the training pool's rendered scenes (wmrl.envs.train_pool) in this session's own cache: two
# pytest workers never render into one folder, and no test reads or fills the user's cache
if "WMRL_CACHE" not in os.environ:
    os.environ["WMRL_CACHE"] = tempfile.mkdtemp(prefix="wmrl-test-cache-")
    atexit.register(shutil.rmtree, os.environ["WMRL_CACHE"], ignore_errors=True)
# pytest-xdist workers (make test: TEST_WORKERS): each worker's torch, and the processes it
# starts, take their share of this machine's cores, not all of them each (two workers of 2
# OpenMP threads on 2 cores oversubscribe). Set before any test imports torch.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))
REAL_DEVICES = os.environ.get("WMRL_REAL_DEVICES") == "1"
# tests live in folders that mirror the package; the shared helpers (toys.py) stay here
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


def pytest_collection_modifyitems(config, items):
    """Device tests need real cards in Ray (``make gpu-check``); fake-resource placement tests
    need the fake ones."""
    import torch

    for item in items:
        if "gpu" in item.keywords and not (REAL_DEVICES and torch.cuda.is_available()):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device: make gpu-check"))
        if "fake_resources" in item.keywords and REAL_DEVICES:
            item.add_marker(pytest.mark.skip(reason="runs on Ray's fake resources"))


@pytest.fixture(scope="module")
def ray_local():
    """A real local Ray per test file (what one file leaves behind, an actor or a wedged
    cluster, cannot starve the next file's actors); workers can import tests/toys.py. It declares
    fake accelerators and a custom resource (4 GPU, 2 NPU, 2 render) so placement tests see
    Ray assign ids; nothing computes on them (RolloutDataModule(compute_on_cpu=True)).
    ``WMRL_REAL_DEVICES=1`` (``make gpu-check``): Ray counts the machine's real cards."""
    import ray

    # workers import the test modules that define actor classes (tests/<package>/test_*.py)
    folders = sorted(e.path for e in os.scandir(TESTS_DIR)
                     if e.is_dir() and not e.name.startswith((".", "_")))
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    paths = [TESTS_DIR, ROOT, *folders]
    os.environ["PYTHONPATH"] = ":".join(paths + [p for p in inherited if p not in paths])
    if TESTS_DIR not in sys.path:
        sys.path.insert(0, TESTS_DIR)
    if ray.is_initialized():  # a Ray some code under test left running: not this file's
        ray.shutdown()
    fake = {} if REAL_DEVICES else dict(num_gpus=4, resources={"NPU": 2, "render": 2})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **fake)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def restore_logging():
    """Each test leaves logging as it found it: a script run in this process (runpy) with
    ``hydra/job_logging=disabled`` disables every existing logger and sets the root to ERROR,
    which silenced the warnings later tests assert on."""
    import logging

    root = logging.getLogger()
    loggers = [lg for lg in root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    saved = [(lg, lg.disabled, lg.level, list(lg.handlers), lg.propagate)
             for lg in (root, *loggers)]
    disabled = logging.root.manager.disable
    yield
    for lg, was_disabled, level, handlers, propagate in saved:
        lg.disabled, lg.propagate = was_disabled, propagate
        lg.setLevel(level)
        lg.handlers[:] = handlers
    logging.disable(disabled)
