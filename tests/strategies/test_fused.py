"""strategies.fused: RMSNorm / rotary swapped for fused kernels, checked against the eager
modules on CPU (torch built-ins) and through a fake ``torch_npu`` that records its calls and
computes the same math with torch (no Ascend card here). transformers' Llama goes through its
kernel hooks (``kernels.kernelize``); modules without hooks through the probe path."""

from __future__ import annotations

import copy
import functools
import pickle
import sys
import types

import kernels
import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaModel
from transformers.models.llama import modeling_llama

from strategies import fused
from strategies.fused import (
    FusedOpsReport,
    apply_fused_ops,
    fused_ops_config,
    kernels_for,
    remove_fused_ops,
)

# transformers marks its layers for kernels only when the kernels library is installed (it is a
# dependency of transformers >= 5.25 and of wmrl)
HOOKS = hasattr(modeling_llama.LlamaRMSNorm, "kernel_layer_name")
needs_hooks = pytest.mark.skipif(not HOOKS, reason="transformers without its kernel hooks")

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, rms_norm_eps=1e-6)


def tiny_llama(seed: int = 0) -> LlamaModel:
    torch.manual_seed(seed)
    model = LlamaModel(LlamaConfig(**TINY)).eval()
    with torch.no_grad():  # non-trivial norm weights (init is all ones)
        for m in model.modules():
            if isinstance(m, modeling_llama.LlamaRMSNorm):
                m.weight.uniform_(0.5, 1.5)
    return model


def llama_inputs(b: int = 3, s: int = 10):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY["vocab_size"], (b, s), generator=g)
    pos = torch.arange(s)[None].repeat(b, 1) + torch.arange(b)[:, None]  # per-row positions
    return dict(input_ids=ids, position_ids=pos, use_cache=False)


@pytest.fixture
def fake_npu(monkeypatch):
    """A ``torch_npu`` in sys.modules: records every kernel call, computes it with torch."""
    calls: list[tuple] = []
    # no __spec__, as the other fake vendors: a library that probes find_spec("torch_npu")
    # while it is installed fails loudly instead of caching "NPU available" for the session
    mod = types.ModuleType("torch_npu")

    def npu_rms_norm(x, gamma, epsilon=1e-6):
        calls.append(("rms_norm", x, gamma, epsilon))
        var = x.float().pow(2).mean(-1, keepdim=True)
        y = (x.float() * torch.rsqrt(var + epsilon)).to(x.dtype) * gamma
        return y, torch.rsqrt(var + epsilon)  # (out, rstd) like the real op

    def npu_rotary_mul(x, r1, r2):
        calls.append(("rotary", x, r1, r2))
        assert x.ndim == 4 and r1.ndim == 4 and r1.shape == r2.shape
        h = x.shape[-1] // 2
        return x * r1 + torch.cat((-x[..., h:], x[..., :h]), -1) * r2

    mod.npu_rms_norm, mod.npu_rotary_mul = npu_rms_norm, npu_rotary_mul
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    return calls


# ---- CPU, torch built-ins -----------------------------------------------------------------
def test_rms_norm_matches_eager_llama_rmsnorm():
    norm = modeling_llama.LlamaRMSNorm(64, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    ref = copy.deepcopy(norm)
    report = apply_fused_ops(norm, "cpu", ops=("rms_norm",))
    assert report.replaced == {"rms_norm": [""]}
    assert report.path == {"rms_norm:": "hooks" if HOOKS else "probe"}
    assert report.kernels == {"rms_norm": "torch.nn.functional.rms_norm"}
    x = torch.randn(4, 7, 64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y_ref = norm(x), ref(x2)
    torch.testing.assert_close(y, y_ref, rtol=1e-6, atol=1e-6)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norm.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)
    # bf16: one rounding instead of eager's two -> within a bf16 ulp
    norm16, ref16 = copy.deepcopy(ref).bfloat16(), copy.deepcopy(ref).bfloat16()
    apply_fused_ops(norm16, "cpu")
    xb = torch.randn(4, 7, 64).bfloat16()
    torch.testing.assert_close(norm16(xb), ref16(xb), rtol=1.6e-2, atol=1e-2)
    # dtype mismatch (fp32 weight, bf16 input): eager's promotion (fp32 output) is kept
    assert norm(xb).dtype == ref(xb).dtype == torch.float32


def test_tiny_llama_cpu_builtins_match_eager():
    eager = tiny_llama()
    model = copy.deepcopy(eager)
    report = apply_fused_ops(model, "cpu")
    assert isinstance(report, FusedOpsReport) and report.device_type == "cpu"
    assert report.replaced["rms_norm"] == ["layers.0.input_layernorm",
                                           "layers.0.post_attention_layernorm",
                                           "layers.1.input_layernorm",
                                           "layers.1.post_attention_layernorm", "norm"]
    assert report.count("rms_norm", "hooks") == (5 if HOOKS else 0)
    assert report.kernels["rotary"] is None and report.replaced["rotary"] == []  # no CPU kernel
    assert "rotary: eager kept" in report.summary() and report.warnings == []
    kw = llama_inputs()
    out = model(**kw).last_hidden_state
    ref = eager(**kw).last_hidden_state
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)
    assert set(model.state_dict()) == set(eager.state_dict())  # nothing renamed


# ---- the NPU path, through a fake torch_npu --------------------------------------------------
@needs_hooks
def test_npu_kernels_called_with_the_right_arguments(fake_npu):
    eager = tiny_llama()
    model = copy.deepcopy(eager)
    # the NPU kernels, routed to CPU tensors (the fake computes them with torch)
    report = apply_fused_ops(model, "cpu", kernels=kernels_for("npu"))
    assert report.kernels == {"rms_norm": "torch_npu.npu_rms_norm",
                              "rotary": "torch_npu.npu_rotary_mul"}
    assert report.count("rms_norm") == 5
    assert report.replaced["rotary"] == ["layers.0.self_attn", "layers.1.self_attn"]
    assert set(report.path.values()) == {"hooks"} and report.warnings == []
    assert "rms_norm: 5 modules -> torch_npu.npu_rms_norm (5 via kernel hooks)" in str(report)
    kw = llama_inputs(b=3, s=10)
    out = model(**kw).last_hidden_state
    torch.testing.assert_close(out, eager(**kw).last_hidden_state, rtol=1e-5, atol=1e-5)

    norms = [m for m in model.modules() if isinstance(m, modeling_llama.LlamaRMSNorm)]
    rms = [c for c in fake_npu if c[0] == "rms_norm"]
    assert len(rms) == 5
    for (_, x, gamma, eps), m in zip(rms, norms):
        assert gamma is m.weight and eps == 1e-6 and x.shape == (3, 10, 64)
    rot = [c for c in fake_npu if c[0] == "rotary"]
    assert len(rot) == 4  # q and k in each of the 2 layers
    head = TINY["hidden_size"] // TINY["num_attention_heads"]
    assert [tuple(c[1].shape) for c in rot[:2]] == [(3, 4, 10, head), (3, 2, 10, head)]
    rope = model.rotary_emb(out, kw["position_ids"])
    for _, _, r1, r2 in rot:  # cos / sin of each row's positions, unsqueezed on the head dim
        torch.testing.assert_close(r1, rope[0][:, None])
        torch.testing.assert_close(r2, rope[1][:, None])
    out.sum().backward()  # differentiable through the kernels
    assert model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


@needs_hooks
def test_npu_device_type_imports_torch_npu_and_routes_only_npu_tensors(fake_npu, monkeypatch):
    eager = tiny_llama()
    model = copy.deepcopy(eager)
    report = apply_fused_ops(model, "npu")
    assert report.device_type == "npu"
    assert report.kernels == {"rms_norm": "torch_npu.npu_rms_norm",
                              "rotary": "torch_npu.npu_rotary_mul"}
    assert (report.count("rms_norm"), report.count("rotary")) == (5, 2)
    kw = llama_inputs()
    # CPU tensors on a model patched for npu: eager, the NPU kernels are never given them
    torch.testing.assert_close(model(**kw).last_hidden_state, eager(**kw).last_hidden_state,
                               rtol=0, atol=0)
    assert fake_npu == []
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # not installed
    with pytest.raises(ImportError, match="torch_npu"):
        apply_fused_ops(tiny_llama(), "npu")


@needs_hooks
def test_no_global_patching_only_this_model_through_kernels(fake_npu):
    rotary_before = modeling_llama.apply_rotary_pos_emb
    forward_before = modeling_llama.LlamaAttention.forward
    norm_forward_before = modeling_llama.LlamaRMSNorm.forward
    model = tiny_llama()
    apply_fused_ops(model, "cpu", kernels=kernels_for("npu"))
    assert modeling_llama.apply_rotary_pos_emb is rotary_before
    assert modeling_llama.LlamaAttention.forward is forward_before
    assert modeling_llama.LlamaRMSNorm.forward is norm_forward_before
    other = tiny_llama()  # another model of the same classes stays eager
    other(**llama_inputs())
    assert fake_npu == []
    # kernels' own inspection: our in-process layers, on this model only
    done = kernels.get_kernelized_layers(model)
    assert sorted(done.layers) == ["layers.0.input_layernorm", "layers.0.post_attention_layernorm",
                                   "layers.1.input_layernorm", "layers.1.post_attention_layernorm",
                                   "norm"]
    assert sorted(done.funcs) == [("layers.0.self_attn", "rotary_pos_emb"),
                                  ("layers.1.self_attn", "rotary_pos_emb")]
    assert {str(x.repo) for x in [*done.layers.values(), *done.funcs.values()]} == {
        "in-process layer strategies.fused.FusedRMSNorm",
        "in-process layer strategies.fused.FusedRotary"}
    assert kernels.get_kernelized_layers(other).layers == {}
    assert kernels.get_kernelized_layers(other).funcs == {}
    # partial-width cos/sin is not given to the kernel: the eager function runs (and fails on
    # these shapes as it would unpatched)
    rotary = done.funcs[("layers.0.self_attn", "rotary_pos_emb")].module
    q, cos = torch.randn(1, 2, 3, 8), torch.randn(1, 3, 4)
    with pytest.raises(RuntimeError):
        rotary(q, q, cos, cos)
    assert fake_npu == []
    # remove_fused_ops: kernels reverts each module to its class forward
    assert remove_fused_ops(model) == 7
    assert kernels.get_kernelized_layers(model).layers == {}
    assert kernels.get_kernelized_layers(model).funcs == {}
    model(**llama_inputs())
    assert fake_npu == []


class HookedGemmaRMSNorm(nn.Module):  # hooks, but (1 + weight): the probe refuses it
    def __init__(self, dim):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.zeros(dim)), 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


class HookedResidualRMSNorm(nn.Module):  # hooks, standard math, another forward signature
    def __init__(self, dim):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(dim)), 1e-6

    def forward(self, x, residual=None):
        x = x if residual is None else x + residual
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                             + self.variance_epsilon)


for _cls in (HookedGemmaRMSNorm, HookedResidualRMSNorm):
    kernels.replace_kernel_forward_from_hub(_cls, "RMSNorm")


def test_hooks_present_nothing_fused_is_a_named_warning():
    model = nn.ModuleDict(dict(gemma=HookedGemmaRMSNorm(8), residual=HookedResidualRMSNorm(8)))
    with pytest.warns(RuntimeWarning, match="rms_norm: 2 modules carry transformers' kernel hooks"):
        report = apply_fused_ops(model, "cpu")
    assert report.count("rms_norm") == 0 and len(report.warnings) == 1
    assert "WARNING rms_norm: 2 modules carry" in report.summary()
    assert "Gemma" in report.skipped["rms_norm:gemma"]
    assert "['x', 'residual'], not one input" in report.skipped["rms_norm:residual"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(model["residual"](x), HookedResidualRMSNorm(8)(x))
    # a real fusion on the same model is not a warning
    model["plain"] = modeling_llama.LlamaRMSNorm(8)
    report = apply_fused_ops(model, "cpu")
    assert report.count("rms_norm") == 1 and report.warnings == []


# ---- duck typing: what is and is not swapped -------------------------------------------------
class GemmaLikeRMSNorm(nn.Module):  # (1 + weight): not the standard formula
    def __init__(self, dim):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.zeros(dim)), 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


class NoEpsRMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.weight


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):  # interleaved pairs (GPT-J style)
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def rot(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((-x2, x1), -1).flatten(-2)

    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


class InterleavedAttention(nn.Module):
    def forward(self, q, cos, sin):
        return apply_rotary_pos_emb(q, q, cos, sin)[0]


llama_rotary = modeling_llama.apply_rotary_pos_emb  # the standard one, under another name


class PlainAttention(nn.Module):
    def forward(self, q, cos, sin):
        return llama_rotary(q, 2 * q, cos, sin)[1]


def opaque(fn):  # a wrapper that keeps fn in a default, not in its closure
    @functools.wraps(fn)
    def wrapper(self, *args, _fn=fn, **kwargs):
        return _fn(self, *args, **kwargs)

    return wrapper


class OpaqueAttention(PlainAttention):
    forward = opaque(PlainAttention.forward)


def test_only_standard_modules_are_swapped():
    model = nn.ModuleDict(dict(
        gemma=GemmaLikeRMSNorm(8), noeps=NoEpsRMSNorm(8),
        noaffine=torch.nn.RMSNorm(8, elementwise_affine=False),
        torch_eps_none=torch.nn.RMSNorm(8), torch_eps=torch.nn.RMSNorm(8, eps=1e-5),
        attn=InterleavedAttention(), layer=nn.LayerNorm(8), plain=PlainAttention(),
        opaque=OpaqueAttention(), hooked=torch.nn.RMSNorm(8),
    ))
    model["hooked"].forward = lambda x: x  # someone else's instance forward
    with torch.no_grad():
        for k in ("torch_eps_none", "torch_eps"):
            model[k].weight.uniform_(0.5, 1.5)
    ref = copy.deepcopy(model)
    calls = []

    def rotary(x, cos, sin):
        calls.append(x.shape)
        return fused.rotary_reference(x, cos, sin)

    report = apply_fused_ops(model, "cpu", kernels={"rotary": rotary},
                             rotary_names=("apply_rotary_pos_emb", "llama_rotary"))
    assert report.replaced == {"rms_norm": ["torch_eps_none", "torch_eps"], "rotary": ["plain"]}
    assert "Gemma" in report.skipped["rms_norm:gemma"]
    assert "eps" in report.skipped["rms_norm:noeps"]
    assert "weight" in report.skipped["rms_norm:noaffine"]
    assert "overridden" in report.skipped["rms_norm:hooked"]
    assert "interleaved" in report.skipped["rotary:attn"]
    assert "decorated" in report.skipped["rotary:opaque"]
    assert set(report.path.values()) == {"probe"}  # no hooks on these classes
    x = torch.randn(2, 5, 8)
    for k in ("gemma", "noeps", "noaffine", "torch_eps_none", "torch_eps", "layer"):
        torch.testing.assert_close(model[k](x), ref[k](x), rtol=1e-6, atol=1e-6, msg=k)
    q, cos, sin = torch.randn(2, 3, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    for k in ("attn", "plain", "opaque"):
        torch.testing.assert_close(model[k](q, cos, sin), ref[k](q, cos, sin), msg=k)
    assert calls == [(2, 3, 5, 8)] * 2  # plain only: q and k
    # applying twice swaps nothing more; remove_fused_ops restores the eager forwards
    assert apply_fused_ops(model, "cpu").count("rms_norm") == 0
    assert remove_fused_ops(model) == 3
    assert [n for n, m in model.named_modules() if "forward" in m.__dict__] == ["hooked"]


def test_wan_transformer_rms_norms(request):
    from diffusers import WanTransformer3DModel  # imported before the fake torch_npu

    fake_npu = request.getfixturevalue("fake_npu")
    torch.manual_seed(0)
    eager = WanTransformer3DModel(
        patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=12, text_dim=32,
        freq_dim=256, ffn_dim=32, num_layers=2, rope_max_seq_len=32, in_channels=4,
        out_channels=4).eval()
    with torch.no_grad():
        for m in eager.modules():
            if isinstance(m, torch.nn.RMSNorm):
                m.weight.uniform_(0.5, 1.5)
    model = copy.deepcopy(eager)
    report = apply_fused_ops(model, "cpu", ops=("rms_norm",), kernels=kernels_for("npu"))
    assert report.count("rms_norm", "probe") == 8  # norm_q / norm_k of attn1/attn2, 2 blocks
    assert report.warnings == []  # torch.nn.RMSNorm carries no hooks: the probe path
    assert all(n.split(".")[-1] in ("norm_q", "norm_k") for n in report.replaced["rms_norm"])
    args = (torch.randn(1, 4, 3, 8, 8), torch.tensor([500]), torch.randn(1, 5, 32))
    with torch.no_grad():
        out = model(*args, return_dict=False)[0]
        ref = eager(*args, return_dict=False)[0]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert sum(c[0] == "rms_norm" for c in fake_npu) == 8


# ---- copies ------------------------------------------------------------------------------------
@needs_hooks
def test_deepcopy_and_pickle_keep_the_fused_forwards(fake_npu):
    model = tiny_llama()
    apply_fused_ops(model, "cpu", kernels=kernels_for("npu"))
    kw = llama_inputs()
    with torch.no_grad():
        ref = model(**kw).last_hidden_state
        for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            fake_npu.clear()
            assert clone.norm.forward.args == (clone.norm,)  # bound to the copy
            done = kernels.get_kernelized_layers(clone)
            assert len(done.layers) == 5 and len(done.funcs) == 2
            wrapper = done.funcs[("layers.0.self_attn", "rotary_pos_emb")].module
            assert wrapper.forward.__self__ is wrapper
            torch.testing.assert_close(clone(**kw).last_hidden_state, ref, rtol=0, atol=0)
            assert len(fake_npu) == 9
            clone.norm.weight.mul_(2)  # a copy's weights are its own
            assert not torch.equal(clone(**kw).last_hidden_state, ref)


def test_fused_ops_config_values():
    assert fused_ops_config(False) is None and fused_ops_config(None) is None
    assert fused_ops_config("off") is None and fused_ops_config("false") is None
    assert fused_ops_config(True) == "auto" and fused_ops_config("auto") == "auto"
    assert fused_ops_config("npu") == "npu" and fused_ops_config("cuda:1") == "cuda"
    assert fused.resolve_device_type("auto") in ("cpu", "cuda", "npu", "musa")
    with pytest.raises(ValueError, match="unknown fused ops"):
        apply_fused_ops(nn.Linear(2, 2), "cpu", ops=("layer_norm",))


# ---- the policy ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eager_policy_logprobs():
    from wmrl.policies.openvla_oft import build_policy

    eager = build_policy()
    assert eager.fused_ops_report is None  # the default: off
    g = torch.Generator().manual_seed(0)
    obs = {"image": torch.randint(0, 256, (3, 40, 40, 3), generator=g, dtype=torch.uint8),
           "task": ["pick up the black bowl", "open the top drawer", "close it"]}
    tokens = eager.sample(obs, 1.6, generator=torch.Generator().manual_seed(0)).tokens
    return obs, tokens, eager.log_probs(obs, tokens, 1.6).detach()


def test_policy_forward_fused_matches_eager(eager_policy_logprobs):
    from wmrl.policies.openvla_oft import build_policy

    obs, tokens, lp = eager_policy_logprobs
    auto = build_policy(fused_ops="auto")
    assert auto.fused_ops_report.device_type == fused.resolve_device_type("auto")
    cpu = build_policy(fused_ops="cpu")
    assert cpu.fused_ops_report.count("rms_norm") == 5  # 2 layers x 2 + final norm
    torch.testing.assert_close(cpu.log_probs(obs, tokens, 1.6), lp, rtol=0, atol=1e-5)


@needs_hooks
def test_policy_forward_npu_kernels_match_eager(eager_policy_logprobs, fake_npu):
    from wmrl.policies.openvla_oft import build_policy

    obs, tokens, lp = eager_policy_logprobs
    npu = build_policy()  # the NPU kernels (fake), as an Ascend run calls them
    report = apply_fused_ops(npu, "cpu", kernels=kernels_for("npu"))
    assert (report.count("rms_norm", "hooks"), report.count("rotary", "hooks")) == (5, 2)
    torch.testing.assert_close(npu.log_probs(obs, tokens, 1.6), lp, rtol=0, atol=1e-5)
    assert {c[0] for c in fake_npu} == {"rms_norm", "rotary"}


@pytest.mark.gpu
def test_cuda_llama_bf16_matches_eager():
    eager = tiny_llama().cuda().bfloat16()
    model = copy.deepcopy(eager)
    report = apply_fused_ops(model, "cuda")
    assert report.count("rms_norm") == 5
    kw = {k: v.cuda() if torch.is_tensor(v) else v for k, v in llama_inputs().items()}
    with torch.no_grad():
        out = model(**kw).last_hidden_state.float()
        ref = eager(**kw).last_hidden_state.float()
    torch.testing.assert_close(out, ref, rtol=5e-2, atol=5e-2)
