"""Single-process checks of the strategies package: vendor device paths with fake vendor
modules (no NPU/MUSA exists here), precision, offload bytes, config, import hygiene."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from strategies import devices
from strategies.accelerators import MUSAAccelerator, NPUAccelerator
from strategies.offload import offload, onload
from strategies.precision import DeviceMixedPrecision, precision_for_device

ROOT = Path(__file__).resolve().parents[2]


def _fake_vendor(monkeypatch, device_type: str, module: str, count: int, fail: bool = False):
    """Install a fake ``torch_npu``/``torch_musa`` that registers ``torch.<device_type>``."""
    calls = {"set_device": []}

    def device_count():
        if fail:
            raise RuntimeError("driver not loaded")
        return count

    ns = types.SimpleNamespace(
        device_count=device_count,
        set_device=lambda d: calls["set_device"].append(str(d)),
        memory_stats=lambda d: {"allocated_bytes.all.current": 7},
    )
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setattr(torch, device_type, ns, raising=False)
    return calls


class _Dev:
    """torch.device stand-in: stock torch rejects "npu"/"musa" until a vendor renames
    privateuse1 (done for real in test_vendor_device_in_subprocess)."""

    def __init__(self, type_: str, index: int) -> None:
        self.type, self.index = type_, index

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"


_SUBPROCESS = r"""
import sys, types, torch
torch.utils.rename_privateuse1_backend("npu")  # what torch_npu does on import
sys.modules["torch_npu"] = types.ModuleType("torch_npu")
seen = []
torch.npu = types.SimpleNamespace(device_count=lambda: 2, set_device=seen.append)
import lightning.pytorch as pl
import strategies
from strategies.precision import DeviceMixedPrecision
t = pl.Trainer(accelerator="npu", devices=2, precision="bf16-mixed",
               strategy=strategies.HybridShardStrategy(), logger=False)
s = t.strategy
assert type(s.accelerator).__name__ == "NPUAccelerator", s.accelerator
assert s.parallel_devices == [torch.device("npu", 0), torch.device("npu", 1)]
assert s._get_process_group_backend() == "cpu:gloo,npu:hccl"
assert s.precision_plugin.device == "cuda"  # Lightning's connector hard-codes it ...
fixed = strategies.precision_for_device(s.precision_plugin, s.root_device.type)
assert isinstance(fixed, DeviceMixedPrecision) and fixed.device == "npu"  # ... we fix it
s.accelerator.setup_device(s.root_device)
assert seen == [torch.device("npu", 0)]
print("OK")
"""


def test_vendor_device_in_subprocess():
    """A Trainer on a fake Ascend stack: accelerator="npu" resolves to NPUAccelerator, devices
    are npu:0/npu:1, the process group is cpu:gloo,npu:hccl and autocast targets npu."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-2000:]


def test_backend_strings_and_rocm(monkeypatch):
    assert devices.process_group_backend("cpu") == "gloo"
    assert devices.process_group_backend("cuda") == "cpu:gloo,cuda:nccl"
    assert devices.process_group_backend("npu") == "cpu:gloo,npu:hccl"
    assert devices.process_group_backend("musa") == "cpu:gloo,musa:mccl"
    assert devices.process_group_backend("xpu") == "cpu:gloo,xpu:xccl"
    with pytest.raises(ValueError, match="Unknown device type 'tpu'"):
        devices.process_group_backend("tpu")
    monkeypatch.setattr(torch.version, "hip", "6.2.1", raising=False)
    assert devices.is_rocm() and devices.describe("cuda")["backend"] == "rccl"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert not devices.is_rocm()


def test_npu_accelerator_with_fake_torch_npu(monkeypatch):
    calls = _fake_vendor(monkeypatch, "npu", "torch_npu", count=4)
    assert NPUAccelerator.is_available() and NPUAccelerator.auto_device_count() == 4
    assert NPUAccelerator.parse_devices(2) == [0, 1]
    assert NPUAccelerator.parse_devices("1,3") == [1, 3]
    with pytest.raises(ValueError, match="ASCEND_RT_VISIBLE_DEVICES"):
        NPUAccelerator.parse_devices(5)
    acc = NPUAccelerator()
    acc.setup_device(_Dev("npu", 1))  # torch.device("npu") exists only once torch_npu renamed it
    assert calls["set_device"] == ["npu:1"]
    assert acc.get_device_stats("npu:1") == {"allocated_bytes.all.current": 7}
    # the Lightning registry resolves accelerator="npu" to this class
    from lightning.pytorch.accelerators import AcceleratorRegistry

    assert isinstance(AcceleratorRegistry.get("npu"), NPUAccelerator)


def test_musa_count_survives_wrong_pymtml(monkeypatch):
    _fake_vendor(monkeypatch, "musa", "torch_musa", count=8)
    demo = types.ModuleType("pymtml")  # the unrelated PyPI demo: no real API, or count 0
    demo.mtmlLibraryInit = lambda: None
    demo.mtmlLibraryCountDevice = lambda: 0
    monkeypatch.setitem(sys.modules, "pymtml", demo)
    assert devices.device_count("musa") == 8 and MUSAAccelerator.is_available()
    # runtime broken: a working management binding is the fallback, a broken one gives 0
    _fake_vendor(monkeypatch, "musa", "torch_musa", count=8, fail=True)
    assert devices.device_count("musa") == 0
    demo.mtmlLibraryCountDevice = lambda: 2
    assert devices.device_count("musa") == 2


def test_missing_vendor_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import raises ImportError
    with pytest.raises(ImportError, match="torch_npu"):
        devices.import_vendor("npu")
    assert devices.device_count("npu") == 0 and not NPUAccelerator.is_available()


def test_visible_devices_rewrite_is_refused(monkeypatch):
    calls = _fake_vendor(monkeypatch, "musa", "torch_musa", count=2)
    monkeypatch.setitem(devices._VISIBLE_AT_IMPORT, "MUSA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "1")
    with pytest.raises(RuntimeError, match="MUSA_VISIBLE_DEVICES changed"):
        MUSAAccelerator().setup_device(_Dev("musa", 0))
    assert calls["set_device"] == []
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "0,1")
    MUSAAccelerator().setup_device(_Dev("musa", 0))
    assert calls["set_device"] == ["musa:0"]


def test_stagger(monkeypatch):
    slept = []
    monkeypatch.setattr(devices.time, "sleep", slept.append)
    assert devices.stagger_first_touch(3, 0.5) == 1.5 and slept == [1.5]
    assert devices.stagger_first_touch(0, 0.5) == 0.0 and slept == [1.5]


def test_mixed_precision_uses_real_device_type():
    from lightning.pytorch.plugins.precision import MixedPrecision, Precision

    stock = MixedPrecision("bf16-mixed", "cuda")  # what Lightning builds for any accelerator
    fixed = precision_for_device(stock, "npu")
    assert isinstance(fixed, DeviceMixedPrecision) and fixed.device == "npu"
    assert precision_for_device(stock, "cuda") is stock
    plain = Precision()
    assert precision_for_device(plain, "musa") is plain
    # and it really autocasts (on the device we have)
    cpu = precision_for_device(stock, "cpu")
    with cpu.forward_context():
        out = nn.Linear(4, 2)(torch.ones(1, 4))
    assert out.dtype == torch.bfloat16


def test_offload_onload_exact_bytes_and_values():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)  # 15 params * 4 B = 60 B; grads 60 B; Adam moments 2 * 60 B
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    params = [p.detach().clone() for p in net.parameters()]
    moments = [v.clone() for s in opt.state.values() for k, v in s.items() if k != "step"]
    down = offload(net, opt)
    assert down.bytes == 60 + 60 + 120 and down.device == "cpu" and down.seconds >= 0
    up = onload(net, opt)
    assert up.bytes == down.bytes and up.device == "cpu"
    assert all(torch.equal(a, b) for a, b in zip(params, net.parameters()))
    after = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
    assert all(torch.equal(a, b) for a, b in zip(moments, after))
    with pytest.raises(ValueError, match="previous offload"):
        onload(nn.Linear(1, 1))


def test_strategy_config_errors():
    from strategies import HybridShardStrategy
    from strategies.sharding import mesh_shape

    s = HybridShardStrategy(wrap_classes=["torch.nn.Linear"], param_dtype="bf16")
    assert s.wrap_classes == (nn.Linear,) and s.param_dtype == torch.bfloat16
    with pytest.raises(ValueError, match="wrap_classes entry 'torch.nn.Nope'"):
        HybridShardStrategy(wrap_classes=["torch.nn.Nope"])
    with pytest.raises(ValueError, match="param_dtype='half8'"):
        HybridShardStrategy(param_dtype="half8")
    with pytest.raises(ValueError, match="accumulation_sync"):
        HybridShardStrategy(accumulation_sync="sometimes")
    assert mesh_shape(16, 8) == (2, 8)
    with pytest.raises(ValueError, match="shard_size=3 must"):
        mesh_shape(8, 3)


def test_hydra_configs_instantiate():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from strategies import HybridShardStrategy

    hybrid = instantiate(OmegaConf.load(ROOT / "conf/strategy/hybrid_shard.yaml"))
    full = instantiate(OmegaConf.load(ROOT / "conf/strategy/full_shard.yaml"))
    assert isinstance(hybrid, HybridShardStrategy) and hybrid.shard_size == "auto"
    assert isinstance(full, HybridShardStrategy) and full.shard_size == "world"
    assert hybrid.param_dtype is None and full.param_dtype is None  # follow the Trainer
    assert OmegaConf.load(ROOT / "conf/strategy/auto.yaml").strategy == "auto"


def test_strategies_imports_only_torch_and_lightning():
    """torch and lightning at import time; ``kernels`` (the optional extra that serves
    transformers' kernel hooks) only inside a function, so strategies imports without it."""
    allowed = {"torch", "lightning", "strategies", "__future__"}
    optional = {"kernels"}
    stdlib = set(sys.stdlib_module_names)

    def imported(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name.split(".")[0] for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            return [node.module.split(".")[0]]
        return []

    for path in (ROOT / "strategies").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            for top in imported(node):
                ok = allowed | stdlib | (set() if id(node) in top_level else optional)
                assert top in ok, f"{path.name} imports {top}"


def test_param_dtype_follows_trainer_precision():
    """``param_dtype=None`` (the default) computes in the Trainer's precision; an explicit
    dtype wins (the default used to be bfloat16 even under ``precision="32-true"``)."""
    import lightning.pytorch as pl

    from strategies import HybridShardStrategy, param_dtype_for_precision

    assert HybridShardStrategy().param_dtype is None
    expected = {"32-true": None, "bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16,
                "16-true": torch.float16}  # what ModelParallelStrategy accepts
    for precision, dtype in expected.items():
        t = pl.Trainer(accelerator="cpu", devices=1, precision=precision,
                       strategy=HybridShardStrategy(), logger=False)
        assert t.strategy.compute_param_dtype() == dtype, precision
    for flag in ("16-mixed", "16"):
        assert param_dtype_for_precision(flag) == torch.float16
    assert param_dtype_for_precision("64-true") is None and param_dtype_for_precision(None) is None
    t = pl.Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", logger=False,
                   strategy=HybridShardStrategy(param_dtype="float32"))
    assert t.strategy.compute_param_dtype() == torch.float32
    t = pl.Trainer(accelerator="cpu", devices=1, precision="32-true", logger=False,
                   strategy=HybridShardStrategy(param_dtype="bf16"))
    assert t.strategy.compute_param_dtype() == torch.bfloat16


def test_root_modules_leaving_parameters_out_warns():
    import warnings

    from strategies import HybridShardStrategy

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = nn.Linear(2, 2)
            self.head = nn.Sequential(*[nn.Linear(2, 2) for _ in range(3)])  # 6 params left out
            self.frozen = nn.Module()  # no parameters: nothing to say

    s = HybridShardStrategy(root_modules=["policy"])
    with pytest.warns(UserWarning, match="6 parameter.*root_modules=\\['policy'\\]") as rec:
        roots = s._roots(M())
    assert roots[0] is not None and len(roots) == 1
    msg = str(rec[0].message)
    assert "head.0.weight, head.0.bias, head.1.weight, head.1.bias, head.2.weight and 1 more" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HybridShardStrategy(root_modules=["policy", "head"])._roots(M())  # all covered: silent
        m = M()
        m.head.requires_grad_(False)  # a frozen part outside the roots is replicated: silent
        assert HybridShardStrategy(root_modules=["policy"])._roots(m) == [m.policy]
    m = M()  # dotted paths name nested roots (the world model's transformer inside .model)
    roots = HybridShardStrategy(root_modules=["policy", "head.0", "head.2"])._roots(m)
    assert roots == [m.policy, m.head[0], m.head[2]]
    with pytest.raises(ValueError, match=r"\['head.7'\] are not submodules"):
        HybridShardStrategy(root_modules=["head.7"])._roots(m)


_ONE_PROCESS_FIT = r"""
import json, sys, tempfile, warnings
from pathlib import Path
import lightning.pytorch as pl, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import strategies

class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.compute_dtypes = []
        self.body[0].register_forward_pre_hook(
            lambda m, args: self.compute_dtypes.append(str(m.weight.dtype)))
    def training_step(self, batch, _):
        return nn.functional.mse_loss(self.body(batch[0]).float(), batch[1])
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.1)

def fit(precision, **kw):
    torch.manual_seed(0)
    x = torch.randn(16, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    s = strategies.HybridShardStrategy(**kw)
    t = pl.Trainer(accelerator="cpu", devices=1, strategy=s, precision=precision, max_steps=2,
                   logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False)
    net = Net()
    t.fit(net, loader)
    return t, net

res = {}
t, net = fit("32-true")
res["dtype_32"] = net.compute_dtypes
full = {k: v.full_tensor() for k, v in net.state_dict().items()}
exp_avg = t.optimizers[0].state[net.body[2].bias]["exp_avg"].full_tensor()
tmp = Path(tempfile.mkdtemp())
t.save_checkpoint(tmp / "sharded.ckpt")
t.strategy._save_distributed_checkpoint = False
t.save_checkpoint(tmp / "one_file.ckpt")
torch.distributed.destroy_process_group()  # loading needs no process group
assert not torch.distributed.is_initialized()
res["dcp_is_dir"] = (tmp / "sharded.ckpt").is_dir()
for name in ("sharded.ckpt", "one_file.ckpt"):
    sd = strategies.load_full_state_dict(tmp / name)
    res[name] = sorted(sd) == sorted(full) and all(
        type(sd[k]) is torch.Tensor and torch.equal(sd[k], full[k]) for k in full)
ckpt = strategies.load_full_checkpoint(tmp / "sharded.ckpt")
opt = ckpt["optimizer_states"][0]
res["meta"] = [ckpt["global_step"], sorted(opt["state"]["body.0.weight"]),
               opt["param_groups"][0]["lr"], opt["param_groups"][0]["params"][:2]]
res["exp_avg"] = torch.equal(opt["state"]["body.2.bias"]["exp_avg"], exp_avg)
t, net = fit("bf16-mixed")
res["dtype_bf16"] = net.compute_dtypes
t, net = fit("bf16-mixed", param_dtype="float32")
res["dtype_bf16_explicit_fp32"] = net.compute_dtypes
print("RESULT" + json.dumps(res))
"""


def test_one_process_fit_dtypes_and_full_state_dict(tmp_path):
    """One CPU process (gloo): compute dtype follows the Trainer precision in a real fit, and
    ``load_full_state_dict`` reads the sharded (DCP) and single-file checkpoints back, without
    a process group, equal to the trained weights."""
    import json
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"):
        env.pop(key, None)
    out = subprocess.run([sys.executable, "-c", _ONE_PROCESS_FIT], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-4000:]
    res = json.loads(out.stdout.split("RESULT", 1)[1])
    assert set(res["dtype_32"]) == {"torch.float32"}, res["dtype_32"]
    assert set(res["dtype_bf16"]) == {"torch.bfloat16"}, res["dtype_bf16"]
    assert set(res["dtype_bf16_explicit_fp32"]) == {"torch.float32"}
    assert res["dcp_is_dir"] and res["sharded.ckpt"] and res["one_file.ckpt"]
    assert res["meta"] == [2, ["exp_avg", "exp_avg_sq", "step"], 0.1, ["body.0.weight", "body.0.bias"]]
    assert res["exp_avg"]
