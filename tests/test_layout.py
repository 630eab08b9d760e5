"""The floor plan, checked statically: the runtime never imports the asset pipeline,
``strategies`` imports only torch + lightning (+ stdlib), and no project import hides inside
a function (the way cycles get dodged)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def imports(path: pathlib.Path):
    """(module name, is at module level) of every import in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top


def files(package: str, skip: tuple[str, ...] = ()):
    return [p for p in (ROOT / package).rglob("*.py")
            if not any(part in skip for part in p.relative_to(ROOT).parts)]


def test_runtime_never_imports_the_pipeline_or_callbacks():
    runtime = files("wmrl", skip=("pipeline", "bench"))
    assert len(runtime) > 20
    # wmrl/fit.py assembles the trainer: the one runtime module that wires callbacks in
    bad = [(str(p.relative_to(ROOT)), m) for p in runtime for m, _ in imports(p)
           if m.startswith("wmrl.pipeline")
           or (m.startswith("callbacks") and p.name != "fit.py")]
    assert bad == []


def test_strategies_imports_only_torch_and_lightning():
    bad = [(str(p.relative_to(ROOT)), m) for p in files("strategies") for m, _ in imports(p)
           if m.split(".")[0] in ("wmrl", "callbacks", "ray", "diffusers", "transformers",
                                  "hydra", "omegaconf", "wandb", "mujoco")]
    assert bad == []


def test_no_project_import_inside_a_function():
    bad = [(str(p.relative_to(ROOT)), m)
           for pkg in ("wmrl", "callbacks", "strategies") for p in files(pkg, skip=("bench",))
           for m, top in imports(p) if not top and m.split(".")[0] in ("wmrl", "callbacks")]
    assert bad == []


def test_tests_mirror_the_package():
    """Every test folder is named after the package folder it tests."""
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    packages = {p.name for p in (ROOT / "wmrl").iterdir() if (p / "__init__.py").exists()}
    assert folders and folders <= packages | {"strategies", "callbacks"}, folders - packages


ACTOR_IMPORTS = """
import sys
import wmrl.rollout.workers, wmrl.policies.openvla_oft, wmrl.envs.wan_env, wmrl.rewards.resnet
import strategies.fused, strategies.devices
sys.path.insert(0, 'tests'); import toys  # the test actors' policies and envs
print(sorted(m for m in ('lightning', 'torchmetrics') if m in sys.modules))
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry
print('npu' in AcceleratorRegistry, 'hybrid_shard' in StrategyRegistry)
strategies.precision_for_device  # a Lightning part of strategies registers npu / musa / hybrid_shard
print('npu' in AcceleratorRegistry, 'musa' in AcceleratorRegistry, 'hybrid_shard' in StrategyRegistry)
import lightning as L
trainer = L.Trainer(strategy="hybrid_shard", accelerator="cpu", devices=1, logger=False)
print(type(trainer.strategy).__name__)
"""


def test_a_rollout_worker_imports_no_lightning_and_strategies_still_registers():
    """What a rollout actor imports (worker, policy, world-model env, reward) loads no Lightning
    (~3 s of every actor start); ``strategies`` still registers its accelerators and
    ``strategy="hybrid_shard"`` once a Lightning part of it is used."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", ACTOR_IMPORTS], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split("\n")
    assert out[:4] == ["[]", "False False", "True True True", "HybridShardStrategy"]
