"""LoRA on the policy (wmrl/weights/lora.py): an adapter peft itself made and saved gives the log-probs
of peft's own ``PeftModel`` (what ``scripts/export.py --adapter`` writes loads in peft:
tests/pipeline/test_export.py); the adapters switched off are the base; a GRPO loss's adapter gradients are the full-parameter gradient projected onto the
adapters (dL/dB = s G A^T, dL/dA = s B^T G); the merged weights are peft's ``merge_and_unload``;
bad specs and adapter directories are refused by name."""

import json

import pytest
import torch
from peft import PeftModel, get_peft_model

from wmrl.algorithms import grpo
from wmrl.errors import ConfigError
from wmrl.policies.openvla_oft import LORA_TARGETS, build_policy
from wmrl.weights.lora import (
    ADAPTER,
    adapters_disabled,
    config_from_json,
    config_json,
    is_adapter_key,
    lora_config,
    merged_state_dict,
    peft_names,
    write_adapter,
)


def obs(b=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (b, 40, 40, 3), dtype=torch.uint8, generator=g)
    return {"image": image, "task": ["pick up the red block"] * b}


def random_adapter(rank=4, alpha=8.0):
    """peft's LoRA with B random too (``init_lora_weights=False``): every adapter acts."""
    return {"rank": rank, "alpha": alpha, "init": False}


@pytest.fixture(scope="module")
def peft_dir(tmp_path_factory):
    """An adapter made and saved by peft itself (``get_peft_model`` + ``save_pretrained``) on
    the tiny policy with RLinf's targets; and the tokens to score."""
    torch.manual_seed(1)
    model = get_peft_model(build_policy(), lora_config(random_adapter(), LORA_TARGETS))
    path = tmp_path_factory.mktemp("peft") / "adapter"
    model.save_pretrained(str(path))
    tokens = model.base_model.model.sample(obs(), 1.0).tokens
    return path, model, tokens


def test_a_peft_adapter_loads_and_scores_as_peftmodel(peft_dir):
    path, peft_model, tokens = peft_dir
    saved = json.loads((path / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 8.0
    ours = build_policy(lora={"path": str(path)})  # rank, alpha, targets: from the directory
    theirs = peft_model.base_model.model.log_probs(obs(), tokens, 1.0)
    mine = ours.log_probs(obs(), tokens, 1.0)
    assert (mine - theirs).abs().max() <= 1e-5
    base = build_policy().log_probs(obs(), tokens, 1.0)
    assert (mine - base).abs().max() > 1e-2  # the adapter matters
    # by hand, one layer: W' = W + (alpha / r) B A from the saved tensors
    from safetensors.torch import load_file

    saved_w = load_file(str(path / "adapter_model.safetensors"))
    name = "language_model.model.layers.0.self_attn.q_proj"
    a = saved_w[f"base_model.model.{name}.lora_A.weight"]
    b = saved_w[f"base_model.model.{name}.lora_B.weight"]
    w = build_policy().state_dict()[f"{name}.weight"]
    merged = merged_state_dict(ours)[f"{name}.weight"]
    assert torch.allclose(merged, w + 2.0 * b @ a, atol=1e-6)


def test_adapters_off_is_the_base_and_a_fresh_adapter_changes_nothing(peft_dir):
    _, _, tokens = peft_dir
    base = build_policy().log_probs(obs(), tokens, 1.0)
    policy = build_policy(lora=random_adapter())
    with adapters_disabled(policy):
        assert torch.equal(policy.log_probs(obs(), tokens, 1.0), base)
    assert (policy.log_probs(obs(), tokens, 1.0) - base).abs().max() > 1e-2  # back on
    fresh = build_policy(lora={"rank": 4, "init": "gaussian"})  # RLinf's init: B = 0
    assert torch.equal(fresh.log_probs(obs(), tokens, 1.0), base)
    trainable = {n for n, p in fresh.named_parameters() if p.requires_grad}
    assert trainable and all(is_adapter_key(n) for n in trainable)


def test_adapter_gradients_are_the_full_gradient_projected(peft_dir):
    """One GRPO loss, twice: on the LoRA policy, and on a plain policy holding the merged
    weights W' = W + s B A. Per adapted layer, with G = dL/dW' from the plain one:
    dL/dB = s G A^T and dL/dA = s B^T G (convolutions flattened to [out, in*k*k])."""
    _, _, tokens = peft_dir
    torch.manual_seed(2)
    lora = build_policy(lora=random_adapter(rank=4, alpha=8.0))
    full = build_policy()
    full.load_state_dict(merged_state_dict(lora))
    advantages = torch.tensor([1.0, -1.0])

    def loss(policy):
        logp = policy.log_probs(obs(), tokens, 1.0)
        old = logp.detach() - 0.05  # ratios of e^0.05: inside the clip, every token counts
        out, _ = grpo.policy_loss(logp, old, advantages, torch.ones_like(logp, dtype=torch.bool))
        return out

    loss(lora).backward()
    loss(full).backward()
    s = 8.0 / 4
    modules = dict(lora.named_modules())
    full_grads = {n: p.grad for n, p in full.named_parameters()}
    checked = unused = 0
    for name, m in modules.items():
        if not hasattr(m, "lora_A") or ADAPTER not in m.lora_A:
            continue
        a, b = m.lora_A[ADAPTER].weight, m.lora_B[ADAPTER].weight
        if full_grads[f"{name}.weight"] is None:  # unused by the policy: each ViT's last
            assert a.grad is None and b.grad is None  # block, SigLIP's MAP head
            assert ".blocks.1." in name or ".attn_pool." in name, name
            unused += 1
            continue
        g = full_grads[f"{name}.weight"].flatten(1)
        a2, b2 = a.flatten(1), b.flatten(1)
        scale = g.abs().max() * s * max(a2.abs().max(), b2.abs().max()) + 1e-12
        assert ((b.grad.flatten(1) - s * g @ a2.T).abs().max() / scale) < 1e-4, name
        assert ((a.grad.flatten(1) - s * b2.T @ g).abs().max() / scale) < 1e-4, name
        checked += 1
    # every target kind of RLinf's list that the tiny policy has: ViT qkv/proj/fc1/fc2 and
    # patch_embed (conv), projector fc1-3, MAP head q/kv, Llama q/k/v/o/gate/up/down, lm_head
    assert checked + unused == len([k for k in lora.state_dict() if ".lora_A." in k])
    assert checked == 28 and unused == 13  # every layer the tiny policy runs


def test_merged_weights_are_peft_merge_and_unload(peft_dir):
    path, _, _ = peft_dir
    ours = build_policy(lora={"path": str(path)})
    merged = merged_state_dict(ours)
    theirs = PeftModel.from_pretrained(build_policy(), str(path)).merge_and_unload().state_dict()
    assert merged.keys() == theirs.keys() == build_policy().state_dict().keys()
    assert max((merged[k] - theirs[k]).abs().max().item() for k in merged) <= 1e-6


@pytest.mark.parametrize("spec, match", [
    ({"rank": 0}, "lora.rank=0"),
    ({"rank": 4, "alpah": 8}, "unknown key"),
    ({"rank": 4, "dropout": 1.5}, "lora.dropout"),
    ({"rank": 4, "target_modules": ["no_such_layer"]}, "lora.target_modules"),
    ({"rank": 4, "init": "pissa_bad"}, "lora.init"),
])
def test_bad_specs_are_refused_by_name(spec, match):
    with pytest.raises(ConfigError, match=match):
        build_policy(lora=spec)


def test_bad_adapter_directories_are_refused_by_name(peft_dir, tmp_path):
    with pytest.raises(ConfigError, match="no adapter_config.json"):
        build_policy(lora={"path": str(tmp_path)})
    # an adapter of other targets: the same file names, other layers
    other = build_policy(lora={"rank": 4, "target_modules": ["q_proj"]})
    # written as scripts/export.py --adapter writes a fit's adapter (wmrl.pipeline.export)
    write_adapter(str(tmp_path / "q_only"), config_from_json(config_json(other)),
                  peft_names(other.state_dict()))
    cfg = json.loads((tmp_path / "q_only" / "adapter_config.json").read_text())
    cfg["target_modules"] = ["q_proj", "v_proj"]  # its config claims more than it holds
    (tmp_path / "q_only" / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="does not fit this model: missing"):
        build_policy(lora={"path": str(tmp_path / "q_only")})
