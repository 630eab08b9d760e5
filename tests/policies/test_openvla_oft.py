"""OpenVLA-OFT policy: tiny real architecture, upstream checkpoint layout, token conventions."""

import json
import math
import os
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from wmrl.interfaces import Policy
from wmrl.policies import action_tokenizer as at
from wmrl.policies import checkpoint
from wmrl.policies.configs import tiny_config
from wmrl.policies.openvla_oft import OpenVLAOFTPolicy, build_policy
from wmrl.policies.vit import Block

TASKS = ["pick up the black bowl and place it on the plate", "open the top drawer"]


def make_obs(b=4, size=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (b, size, size, 3), generator=g, dtype=torch.uint8)
    return {"image": img, "task": [TASKS[i % 2] for i in range(b)]}


@pytest.fixture(scope="module")
def policy():
    return build_policy()


def test_conforms_to_interface(policy):
    assert isinstance(policy, Policy)
    assert (policy.chunk, policy.action_dim) == (8, 7)
    assert Block in policy.fsdp_wrap_classes
    assert any("DecoderLayer" in c.__name__ for c in policy.fsdp_wrap_classes)


def test_sample_shapes_and_logprob_agreement(policy):
    obs = make_obs()
    s = policy.sample(obs, 1.6, generator=torch.Generator().manual_seed(1))
    assert s.tokens.shape == (4, 56) and s.tokens.dtype == torch.long
    assert s.actions.shape == (4, 8, 7) and s.logprobs.shape == (4, 56)
    assert s.tokens.min() >= 0 and s.tokens.max() < 256
    lp, ent = policy.log_probs(obs, s.tokens, 1.6, return_entropy=True)
    torch.testing.assert_close(lp, s.logprobs, atol=1e-5, rtol=0)
    assert ent.shape == (4, 56) and (ent > 0).all() and (ent <= math.log(256) + 1e-4).all()
    lp.sum().backward()
    for name in ("language_model.model.layers.0.self_attn.q_proj.weight", "projector.fc1.weight",
                 "vision_backbone.featurizer.blocks.0.attn.qkv.weight"):
        assert dict(policy.named_parameters())[name].grad.abs().sum() > 0, name
    policy.zero_grad(set_to_none=True)


def test_same_generator_same_sample(policy):
    obs = make_obs()
    a = policy.sample(obs, 1.6, generator=torch.Generator().manual_seed(3))
    b = policy.sample(obs, 1.6, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)


def test_padding_does_not_change_a_row(policy):
    """Left-padding a short prompt in a batch with a long one gives the row's own logits."""
    obs = make_obs(b=2)
    both = policy.action_logits(obs)
    alone = policy.action_logits({"image": obs["image"][1:], "task": obs["task"][1:]})
    torch.testing.assert_close(both[1:], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_bidirectional_attention(attn):
    """Perturbing the LAST action placeholder must change the FIRST action's logits."""
    policy = build_policy(attn_implementation=attn)
    obs = make_obs(b=2)
    base = policy.action_logits(obs)

    def bump_last(module, args, kwargs):
        e = kwargs["inputs_embeds"].clone()
        e[:, -1] += 1.0
        kwargs["inputs_embeds"] = e
        return args, kwargs

    h = policy.language_model.model.register_forward_pre_hook(bump_last, with_kwargs=True)
    try:
        bumped = policy.action_logits(obs)
    finally:
        h.remove()
    assert (bumped[:, 0] - base[:, 0]).abs().max() > 1e-4


def test_refuses_causal_backends():
    p = build_policy()
    p.language_model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(RuntimeError, match="flash_attention_2"):
        p.sample(make_obs(b=1), 1.6)
    # A backend named "sdpa" that still applies a causal mask is caught by the probe.
    p = build_policy()

    def causal(module, args, kwargs):
        n = kwargs["inputs_embeds"].shape[1]
        m = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)
        kwargs["attention_mask"] = m.expand(kwargs["inputs_embeds"].shape[0], 1, n, n)
        return args, kwargs

    p.language_model.model.register_forward_pre_hook(causal, with_kwargs=True)
    with pytest.raises(RuntimeError, match="causal"):
        p.sample(make_obs(b=1), 1.6)


def test_eager_matches_sdpa():
    obs = make_obs(b=2)
    a = build_policy(attn_implementation="sdpa").action_logits(obs)
    b = build_policy(attn_implementation="eager").action_logits(obs)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_action_ids_below_padding():
    """vocab_base=10, 4 bins: ids 6..9 are actions, id 9 = bin 0; padding ids >= 10 excluded."""
    logits = torch.tensor([[0.0, 0, 0, 0, 0, 100, 1, 2, 3, 4, 1000, 1000]])
    torch.testing.assert_close(at.bin_logits(logits, 10, 4), torch.tensor([[4.0, 3, 2, 1]]))
    # only the action ids' columns (ids 6..9), as the policy computes them
    torch.testing.assert_close(at.bin_logits(logits[:, 6:10], 10, 4, first_id=6),
                               torch.tensor([[4.0, 3, 2, 1]]))
    with pytest.raises(ValueError, match="do not cover the action ids"):
        at.bin_logits(logits[:, 7:10], 10, 4, first_id=7)
    draws = torch.multinomial(at.process_logits(at.bin_logits(logits, 10, 4), 1.0).exp(), 500,
                              replacement=True, generator=torch.Generator().manual_seed(0))
    assert draws.min() >= 0 and draws.max() < 4


def test_temperature_and_top_k():
    logits = torch.tensor([0.0, math.log(2), -1.0, -2.0])
    # T=1 over the top-2: p = [1/3, 2/3]; T=0.5: logits*2 -> p = [1/5, 4/5]
    torch.testing.assert_close(at.process_logits(logits, 1.0, top_k=2)[:2].exp(),
                               torch.tensor([1 / 3, 2 / 3]))
    torch.testing.assert_close(at.process_logits(logits, 0.5, top_k=2)[:2].exp(),
                               torch.tensor([1 / 5, 4 / 5]))
    assert torch.isinf(at.process_logits(logits, 1.0, top_k=2)[2:]).all()
    lp = at.process_logits(logits, 1.6)
    torch.testing.assert_close(lp, torch.log_softmax(logits / 1.6, -1))
    p = build_policy(overrides={"top_k": 3})
    obs = make_obs(b=2)
    s = p.sample(obs, 1.6, generator=torch.Generator().manual_seed(0))
    top3 = p.action_logits(obs).topk(3, dim=-1).indices
    assert (top3 == s.tokens[..., None]).any(-1).all()


def test_detokenisation_by_hand():
    """bin -> centre -> q01/q99 -> value; gripper -sign(2g - 1)."""
    stats = {"d": {"action": {"q01": [-0.5, 0.0, 0.0], "q99": [1.5, 2.0, 1.0],
                              "mask": [True, False, False]}}}
    s = at.ActionStats(stats, "d", 3)
    # centre(b) = -1 + (2/255)(b + 0.5): b=127 -> 0.0; b=0 -> -254/255; b=255 clips to 254.
    bins = torch.tensor([[127, 0, 255], [0, 127, 127]])
    a = s.decode(bins, 256, gripper="none")
    torch.testing.assert_close(a[0], torch.tensor([0.5, -254 / 255, 254 / 255]))
    # dim 0: 0.5 (x + 1)(2 + 1e-8) - 0.5 = x + 0.5 -> 1/255 - 0.5
    torch.testing.assert_close(a[1, 0], torch.tensor(1 / 255 - 0.5))
    g = s.decode(bins, 256, gripper="libero")[:, 2]
    # gripper 254/255 (open in RLDS) -> -1 (open in LIBERO); 0.0 -> -sign(-1) = +1 (close)
    torch.testing.assert_close(g, torch.tensor([-1.0, 1.0]))


def test_gripper_mapping():
    a = torch.tensor([[0.1, 0.9], [0.2, 0.1], [0.3, 0.6], [0.0, 0.4]])
    torch.testing.assert_close(at.map_gripper(a, "libero")[:, 1], torch.tensor([-1.0, 1, -1, 1]))
    with pytest.raises(ValueError, match="gripper"):
        at.map_gripper(a, "nope")


def test_unnorm_key_errors():
    with pytest.raises(KeyError, match="libero_goal.*available.*libero_spatial_no_noops"):
        build_policy(unnorm_key="libero_goal")
    # RLinf's fallback: "libero_spatial" -> "libero_spatial_no_noops"
    assert build_policy(unnorm_key="libero_spatial").stats.key == "libero_spatial_no_noops"
    cfg = tiny_config()
    cfg["norm_stats"] = {}
    with pytest.raises(ValueError, match="dataset_statistics.json"):
        build_policy(config=cfg)


def test_a_checkpoint_from_1_gib_loads_with_a_progress_bar(tmp_path, policy, monkeypatch,
                                                           capsys):
    policy.save_pretrained(str(tmp_path / "ckpt"))
    OpenVLAOFTPolicy.from_pretrained(str(tmp_path / "ckpt"), unnorm_key="libero_spatial_no_noops")
    assert "[load]" not in capsys.readouterr().err  # the tiny policy: quiet
    monkeypatch.setattr(checkpoint, "LOAD_PROGRESS_BYTES", 0)  # as if it were 7B
    OpenVLAOFTPolicy.from_pretrained(str(tmp_path / "ckpt"), unnorm_key="libero_spatial_no_noops")
    assert f"[load] {tmp_path / 'ckpt'}" in capsys.readouterr().err


def test_save_load_round_trip(tmp_path, policy):
    out = tmp_path / "ckpt"
    policy.save_pretrained(str(out), max_shard_bytes=200_000)
    files = sorted(os.listdir(out))
    shards = [f for f in files if f.startswith("model-")]
    assert len(shards) >= 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for name in ("config.json", "dataset_statistics.json", "model.safetensors.index.json",
                 "tokenizer.json"):
        assert name in files
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "openvla" and cfg["n_action_bins"] == 256
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temp leftovers
    loaded = OpenVLAOFTPolicy.from_pretrained(str(out), unnorm_key="libero_spatial_no_noops")
    sd0, sd1 = policy.state_dict(), loaded.state_dict()
    assert sd0.keys() == sd1.keys()
    assert all(torch.equal(sd0[k], sd1[k]) for k in sd0)
    obs = make_obs()
    a = policy.sample(obs, 1.6, generator=torch.Generator().manual_seed(5))
    b = loaded.sample(obs, 1.6, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logprobs, b.logprobs)
    # the tokenizer loads by its tokenizer_config.json class (not AutoTokenizer, which reads
    # config.json's unknown model_type): the same ids as AutoTokenizer gives
    from transformers import AutoTokenizer

    from wmrl.policies.text_tokenizer import load_tokenizer

    prompt = "In: What action should the robot take to put the red block on the plate?\nOut:"
    assert load_tokenizer(str(out))(prompt).input_ids == \
        AutoTokenizer.from_pretrained(str(out))(prompt).input_ids
    policy.save_pretrained(str(out))  # overwrite an existing checkpoint atomically
    assert len([f for f in os.listdir(out) if f.startswith("model-")]) == 1


def _edit_shard(ckpt, fn):
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shard = ckpt / index["weight_map"]["projector.fc1.weight"]
    tensors = load_file(str(shard))
    fn(tensors, index["weight_map"], shard.name)
    save_file(tensors, str(shard))
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("case", ["missing", "unexpected", "shape"])
def test_bad_checkpoint_names_the_key(tmp_path, policy, case):
    ckpt = tmp_path / "ckpt"
    policy.save_pretrained(str(ckpt))

    def edit(t, wmap, shard):
        if case == "missing":
            del t["projector.fc1.weight"], wmap["projector.fc1.weight"]
        elif case == "unexpected":
            t["projector.fc4.weight"] = torch.zeros(2)
            wmap["projector.fc4.weight"] = shard
        else:
            t["projector.fc1.weight"] = torch.zeros(3, 3)

    _edit_shard(ckpt, edit)
    err = ValueError if case == "shape" else KeyError
    key = "projector.fc4.weight" if case == "unexpected" else "projector.fc1.weight"
    with pytest.raises(err, match=key):
        OpenVLAOFTPolicy.from_pretrained(str(ckpt))


def test_bf16_and_gradient_checkpointing():
    obs = make_obs(b=2)
    ref = build_policy()
    s = ref.sample(obs, 1.6, generator=torch.Generator().manual_seed(0))
    ck = build_policy(gradient_checkpointing=True).train()
    lp = ck.log_probs(obs, s.tokens, 1.6)
    torch.testing.assert_close(lp, s.logprobs, atol=1e-5, rtol=0)
    lp.sum().backward()
    assert ck.projector.fc1.weight.grad.abs().sum() > 0
    bf = build_policy(dtype="bfloat16")
    assert bf.language_model.model.embed_tokens.weight.dtype == torch.bfloat16
    lpb = bf.log_probs(obs, s.tokens, 1.6)
    assert lpb.dtype == torch.float32 and (lpb - s.logprobs).abs().mean() < 0.1


def test_wrist_image_and_proprio():
    p = build_policy(overrides={"num_images_in_input": 2, "proprio_dim": 8})
    obs = make_obs(b=2)
    obs["wrist_image"] = torch.zeros_like(obs["image"])
    obs["state"] = torch.zeros(2, 8)
    a = p.action_logits(obs)
    obs["wrist_image"] = torch.full_like(obs["image"], 200)
    b = p.action_logits(obs)
    assert (a - b).abs().max() > 1e-4
    assert "proprio_projector.fc1.weight" in p.state_dict()
    with pytest.raises(KeyError, match="wrist_image"):
        p.action_logits(make_obs(b=1))


def test_bad_image_is_rejected(policy):
    with pytest.raises(ValueError, match="uint8"):
        policy.sample({"image": torch.zeros(1, 8, 8, 3), "task": ["x"]}, 1.0)


def policy_group(*overrides):
    """conf/policy/<option> as scripts/fit.py composes it (its lora sub-group included)."""
    from hydra import compose, initialize_config_dir

    conf = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "conf"))
    with initialize_config_dir(conf, version_base="1.3"):
        return compose(config_name="fit", overrides=list(overrides)).policy


def test_hydra_configs_build():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    tiny = policy_group("policy=openvla_oft_tiny")
    assert tiny.lora is None
    pickle.dumps(OmegaConf.to_container(tiny))
    p = instantiate(tiny)
    assert p.sample(make_obs(b=1), 1.6).actions.shape == (1, 8, 7)
    big = policy_group("policy=openvla_oft_7b")
    assert big._target_ == tiny._target_ and big.dtype == "bfloat16" and big.lora is None
    # policy/lora=rlinf: RLinf's LoRA (rank 32 = alpha, gaussian init, its target list)
    lora = policy_group("policy=openvla_oft_tiny", "policy/lora=rlinf").lora
    assert (lora.rank, lora.alpha, lora.dropout, lora.init) == (32, 32, 0.0, "gaussian")
    p = instantiate(policy_group("policy=openvla_oft_tiny", "policy/lora=rlinf",
                                 "policy.lora.rank=4"))
    trainable = [n for n, q in p.named_parameters() if q.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    assert p.language_model.lm_head.lora_A["default"].weight.shape[0] == 4


def test_published_7b_architecture_on_meta():
    """An upstream config.json (sparse Llama text_config, timm ids) builds the 7.54B layout."""
    cfg = {
        "model_type": "openvla", "vision_backbone_id": "dinosiglip-vit-so-224px",
        "use_fused_vision_backbone": True, "image_sizes": [224, 224],
        "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
        "pad_to_multiple_of": 64, "n_action_bins": 256, "pad_token_id": 32000,
        "text_config": {"model_type": "llama", "pad_token_id": 32000, "vocab_size": 32064,
                        "torch_dtype": "bfloat16"},
        "norm_stats": tiny_config()["norm_stats"],
    }
    with torch.device("meta"):
        m = OpenVLAOFTPolicy(cfg)
    sd = m.state_dict()
    assert sum(v.numel() for v in sd.values()) == 7_541_237_184
    shapes = {
        "vision_backbone.featurizer.pos_embed": (1, 256, 1024),
        "vision_backbone.featurizer.reg_token": (1, 4, 1024),
        "vision_backbone.featurizer.blocks.23.ls2.scale_factor": (1024,),
        "vision_backbone.fused_featurizer.blocks.26.mlp.fc1.weight": (4304, 1152),
        "vision_backbone.fused_featurizer.attn_pool.kv.weight": (2304, 1152),
        "projector.fc1.weight": (8704, 2176),
        "projector.fc3.weight": (4096, 4096),
        "language_model.lm_head.weight": (32064, 4096),
    }
    assert {k: tuple(sd[k].shape) for k in shapes} == shapes
    assert m.vocab_base == 32000 and m.num_patches == 256
    assert m.language_model.lm_head.weight.dtype == torch.float32  # dtype is ours, not config's


# ---- images as RLinf's processor makes them (issue 17, part 5 B) --------------------------------
def test_resize_rounds_back_to_uint8_by_hand():
    """2x2 -> 1x1, bicubic antialiased: the four pixels weigh the same (distance 0.25 in the
    kernel's scaled units each), so the value is their mean 191.25, rounded to 191 before
    /255 and normalising, as torchvision's resize of a uint8 tensor does in RLinf."""
    from wmrl.policies.openvla_oft import resize_like_rlinf

    x = torch.tensor([[0.0, 255.0], [255.0, 255.0]]).expand(1, 3, 2, 2)
    y = resize_like_rlinf(x, 1)
    assert y.shape == (1, 3, 1, 1) and torch.equal(y, torch.full((1, 3, 1, 1), 191.0))
    assert torch.equal(resize_like_rlinf(x, 2), x)  # same size: untouched
    # normalised with SigLIP's 0.5/0.5: (191/255 - 0.5) / 0.5, not the unrounded 0.5
    assert abs((191 / 255 - 0.5) / 0.5 - 0.498039) < 1e-6


def test_policy_pixels_are_resized_uint8_values(policy):
    """Every pixel the ViTs see is (k/255 - mean) / std for an integer k (256 -> 224 as in the
    7B config; here the tiny model's 40 -> 32)."""
    from wmrl.policies.openvla_oft import resize_like_rlinf

    img = make_obs(b=2, size=40)["image"]
    pix = policy._pixels(img)
    for i, p in enumerate(pix):
        k = (p * policy._std[i] + policy._mean[i]) * 255
        assert torch.allclose(k, k.round(), atol=2e-3)
        want = resize_like_rlinf(img.permute(0, 3, 1, 2).float(), policy.image_sizes[i])
        assert torch.allclose(k.round(), want)
    assert not policy.config["wmrl"]["center_crop"]


def test_7b_config_matches_rlinf_libero_rollout():
    cfg = policy_group("policy=openvla_oft_7b")
    assert cfg.overrides.center_crop is False  # RLinf reads center_crop only for RoboTwin


# ---- which checkpoints load (issue 17, part 5 C) ---------------------------------------------
@pytest.mark.parametrize("files", [
    ["action_head--150000_checkpoint.pt", "proprio_projector--150000_checkpoint.pt"],
    ["action_head--latest_checkpoint.pt"],
    ["proprio_projector--50000_checkpoint.pt"],
])
def test_refuses_openvla_oft_continuous_action_releases(tmp_path, policy, files):
    """openvla-oft's L1-regression releases keep the action head and proprio projector beside
    the backbone; the backbone would load by key but not reproduce the actions: refused."""
    from wmrl.policies.openvla_oft import build_policy_meta

    ckpt = tmp_path / "ckpt"
    policy.save_pretrained(str(ckpt))
    for name in files:
        (ckpt / name).write_bytes(b"")
    for load in (lambda: OpenVLAOFTPolicy.from_pretrained(str(ckpt)),
                 lambda: build_policy(pretrained_path=str(ckpt)),
                 lambda: build_policy_meta(pretrained_path=str(ckpt))):
        with pytest.raises(ValueError, match="discrete action-token") as err:
            load()
        assert all(name in str(err.value) for name in files)
        assert "RLinf" in str(err.value)


def test_token_checkpoint_with_unrelated_pt_files_loads(tmp_path, policy):
    ckpt = tmp_path / "ckpt"
    policy.save_pretrained(str(ckpt))
    (ckpt / "training_state.pt").write_bytes(b"")  # not a side head: no refusal
    loaded = OpenVLAOFTPolicy.from_pretrained(str(ckpt), unnorm_key="libero_spatial_no_noops")
    assert torch.equal(loaded.projector.fc1.weight, policy.projector.fc1.weight)


def test_meta_build_needs_no_checkpoint():
    from wmrl.policies.openvla_oft import build_policy_meta

    m = build_policy_meta(pretrained_path="/nonexistent/openvla", dtype="bfloat16")
    assert {p.device.type for p in m.parameters()} == {"meta"}
    assert sum(p.numel() for p in m.parameters()) == 7_541_237_184
    assert next(m.parameters()).dtype == torch.bfloat16
    tiny = build_policy_meta()
    assert sum(p.numel() for p in tiny.parameters()) == \
        sum(p.numel() for p in build_policy().parameters())
