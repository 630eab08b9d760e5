"""The floor plan, checked statically: every import goes down a floor (``FLOORS``: no circles,
the runtime never imports the offline pipeline), ``strategies`` imports only torch + lightning
(+ stdlib), and no project import hides inside a function (the way cycles get dodged)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def imports(path: pathlib.Path):
    """(module name, is at module level) of every import in ``path`` (``from wmrl import x``
    imports ``wmrl.x``)."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "wmrl" and node.level == 0:
            for alias in node.names:
                yield f"wmrl.{alias.name}", id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top


def files(package: str, skip: tuple[str, ...] = ()):
    return [p for p in (ROOT / package).rglob("*.py")
            if not any(part in skip for part in p.relative_to(ROOT).parts)]


# The floors of the house: a module imports only from floors below its own (so no circles,
# and nothing runs back up). A node is a package of wmrl or one of its top-level modules.
FLOORS = {
    "errors": -1,  # the leaf every module may import (io.atomic's refusals are ConfigErrors)
    "wmrl": 0, "interfaces": 0,
    "io": 0,  # files written whole, videos, pixels: imports errors only
    "weights": 1,  # dtypes, sharded safetensors, random weights, LoRA: imports errors and io
    "measure": 1,  # tracing, peak memory, statistics, run logs: imports io
    "build": 1, "sim": 1,
    "lerobot": 1,  # LeRobot datasets read and written; imports errors and io only
    "world_model": 2, "algorithms": 2, "policies": 2, "rewards": 2,  # on weights' dtypes
    "envs": 3, "rollout": 3,
    "schema": 4,  # takes the choice lists from the components; none of them imports it
    "asset_checks": 5,
    "config": 6,
    "launch": 6,  # the one trainer set-up of every Lightning entry point (wires callbacks in)
    "finetune": 7,
    "eval": 8, "pace": 8, "plan": 8, "module": 8,
    "fit": 9,  # assembles the trainer: the one runtime module that wires callbacks in
    "pipeline": 10,  # offline: importers, behaviour cloning, export (scripts/ run it)
    "full_size_check": 11,  # each part of a fit at full size beside the plan: runs pipeline/
    "bench": 12,  # scripts/bench.py's figures (cpu_bf16: the full-size check's cpu_linear)
}


def node(path: pathlib.Path) -> str:
    """The floor-plan node of a file under wmrl/: its package, or its module's name."""
    rel = path.relative_to(ROOT / "wmrl").parts
    return rel[0].removesuffix(".py") if len(rel) == 1 else rel[0]


def test_every_import_goes_down_a_floor():
    runtime = files("wmrl")
    nodes = {node(p) for p in runtime} - {"__init__"}
    assert nodes == set(FLOORS) - {"wmrl"}, nodes ^ (set(FLOORS) - {"wmrl"})  # each on a floor
    bad = []
    for p in runtime:
        src = node(p)
        for m, _ in imports(p):
            parts = m.split(".")
            if parts[0] == "callbacks" and src not in ("fit", "launch", "bench"):
                bad.append((str(p.relative_to(ROOT)), m, "callbacks"))
            if parts[0] != "wmrl" or len(parts) == 1:
                continue
            dst = parts[1]
            if dst != src and FLOORS[dst] >= FLOORS.get(src, 0):
                bad.append((str(p.relative_to(ROOT)), m, f"up to floor {FLOORS[dst]}"))
    assert bad == []


def test_callbacks_never_import_the_offline_pipeline():
    bad = [(str(p.relative_to(ROOT)), m) for p in files("callbacks") for m, _ in imports(p)
           if m.startswith(("wmrl.pipeline", "wmrl.bench"))]
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


def test_the_policy_loads_no_simulator():
    """A component imports no config schema, so the 7B policy's import pulls in no MuJoCo."""
    import subprocess
    import sys

    code = "import sys, wmrl.policies.openvla_oft, wmrl.rewards.resnet, wmrl.envs.wan_env; " \
           "print(sorted(m for m in ('mujoco', 'wmrl.schema', 'wmrl.sim.tabletop') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == "[]"
