"""Tiny action-conditioned Wan model: action injection through diffusers hooks, anchor-cached
encoding, save/load, flow-matching sampler, and one training step of the objective the trainer
uses (``FlowMatchObjective``) lowering its loss."""

import copy

import pytest
import torch

from wmrl.world_model.action_wan import ActionWanModel, build_world_model
from wmrl.world_model.objective import FlowMatchObjective
from wmrl.world_model.sampler import euler_sample, inference_sigmas, shift_sigmas

TRANSFORMER = dict(
    patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=12, text_dim=32,
    freq_dim=256, ffn_dim=32, num_layers=2, rope_max_seq_len=32,
)
VAE16 = dict(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
             temperal_downsample=[False, True, True])
VAE48 = dict(VAE16, z_dim=48, in_channels=12, out_channels=12, is_residual=True, patch_size=2,
             scale_factor_spatial=16, latents_mean=[0.1] * 48, latents_std=[2.0] * 48)


def tiny(z_dim=48, seed=0) -> ActionWanModel:
    vae = VAE48 if z_dim == 48 else VAE16
    cfg = dict(transformer=dict(TRANSFORMER, in_channels=z_dim, out_channels=z_dim), vae=vae,
               action=dict(num_text_tokens=3), init_seed=seed)
    return build_world_model(cfg).eval()


@pytest.fixture(scope="module")
def model48():
    return tiny(48)


def test_sigma_schedule_and_euler_by_hand():
    assert torch.allclose(inference_sigmas(5, shift=1.0), torch.tensor([1, .8, .6, .4, .2, 0.]))
    # shift 5 at sigma 0.5: 5*0.5 / (1 + 4*0.5) = 2.5 / 3
    assert shift_sigmas(torch.tensor(0.5), 5.0).item() == pytest.approx(2.5 / 3)
    # straight path from noise 5 to x0 2: v = noise - x0 = 3 everywhere -> Euler lands on 2
    x = euler_sample(lambda x, t: torch.full_like(x, 3.0), torch.full((2,), 5.0),
                     inference_sigmas(5, shift=5.0))
    assert torch.allclose(x, torch.full((2,), 2.0))


@pytest.mark.parametrize("z_dim", [16, 48])
def test_generate_shapes_and_both_action_channels(z_dim):
    m = tiny(z_dim)
    h = 32 // m.spatial_ratio
    cond = torch.randn(2, z_dim, 2, h, h)
    noise = torch.randn(2, z_dim, 2, h, h)
    acts = torch.rand(2, 13, 7, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        new = m.generate(cond, acts, noise, num_steps=3)
        video = m.decode(torch.cat([cond, new], 2))
    assert new.shape == noise.shape and torch.isfinite(new).all()
    assert video.shape == (2, 3, 13, 32, 32) and video.abs().max() <= 1.0
    ts = torch.tensor([[0.0, 0.0, 500.0, 500.0]] * 2)
    x = torch.cat([cond, noise], 2)
    with torch.no_grad():
        base = m.velocity(x, ts, acts)
        # each channel alone changes the prediction
        only_tokens, only_time = copy.deepcopy(m), copy.deepcopy(m)
        for mod in (only_tokens.action.action_mlp2[-1], only_time.action.action_mlp1[-1]):
            torch.nn.init.zeros_(mod.weight)
            torch.nn.init.zeros_(mod.bias)
        for mm in (only_tokens, only_time):
            assert not torch.equal(mm.velocity(x, ts, acts), mm.velocity(x, ts, acts + 0.5))
    assert base.shape == x.shape


def test_hooks_feed_context_and_time_embedding(model48):
    m = model48
    seen = {}
    acts = torch.arange(5 * 7, dtype=torch.float32).view(1, 5, 7)
    h1 = m.transformer.blocks[0].attn2.register_forward_pre_hook(
        lambda mod, args: seen.__setitem__("ctx", args[1].shape))
    h2 = m.action.action_mlp2[0].register_forward_pre_hook(
        lambda mod, args: seen.__setitem__("groups", args[0].clone()))
    h3 = m.transformer.condition_embedder.time_embedder.register_forward_hook(
        lambda mod, args, out: seen.__setitem__("temb", (args[0].clone(), out.clone())))
    x = torch.randn(1, 48, 2, 2, 2)  # 32 px -> 2x2 latent -> 1 token per latent frame
    with torch.no_grad():
        m.velocity(x, torch.tensor([[0.0, 700.0]]), acts)
    for h in (h1, h2, h3):
        h.remove()
    assert seen["ctx"] == (1, 3 + 5, 24)  # 3 text tokens + 5 action tokens, dim 24
    a = acts[0]
    # first latent frame: action 0 repeated 4x; second: actions 1..4
    assert torch.equal(seen["groups"][0, 0], a[0].repeat(4))
    assert torch.equal(seen["groups"][0, 1], a[1:5].flatten())
    t_in, temb = seen["temb"]
    with torch.no_grad():
        plain = m.transformer.condition_embedder.time_embedder(t_in)  # hook state cleared
        added = m.action.latent_embedding(acts)
    assert torch.allclose(temb, plain + added, atol=1e-6)


@pytest.mark.parametrize("z_dim", [16, 48])
def test_anchor_cached_encoding_is_bit_identical(z_dim):
    m = tiny(z_dim)
    video = torch.rand(4, 3, 5, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        full = m.encode(video)
        anchor = m.encode_anchor(video[:, :, :1])
        assert torch.equal(m.encode_with_anchor(anchor, video[:, :, 1:]), full)
        again = m.encode_with_anchor(anchor, video[:, :, 1:])  # anchor reusable
        rows = torch.tensor([1, 3])
        sub = m.encode_with_anchor(m.encode_anchor(video[rows][:, :, :1]), video[rows][:, :, 1:])
        assert torch.equal(sub, m.encode(video[rows]))
        # selecting rows of a cache is exact where the VAE is batch-size invariant (16-ch)
        if z_dim == 16:
            assert torch.equal(m.encode_with_anchor(anchor.select(rows), video[rows][:, :, 1:]),
                               full[rows])
    assert torch.equal(again, full)
    assert full.shape == (4, z_dim, 2, 32 // m.spatial_ratio, 32 // m.spatial_ratio)


def test_save_and_load_pretrained_roundtrip(tmp_path, model48):
    path = tmp_path / "wan_tiny"
    model48.save_pretrained(path)
    model48.save_pretrained(path)  # overwrite in place
    assert sorted(p.name for p in path.iterdir()) == [".wmrl_output.json", "action",
                                                      "transformer", "vae"]
    loaded = build_world_model({"path": str(path)}).eval()
    x = torch.randn(2, 48, 4, 2, 2)
    ts = torch.tensor([[0.0, 0.0, 300.0, 300.0]] * 2)
    acts = torch.randn(2, 13, 7)
    with torch.no_grad():
        assert torch.equal(loaded.velocity(x, ts, acts), model48.velocity(x, ts, acts))
    assert loaded.shift == model48.shift
    with pytest.raises(FileNotFoundError, match="action_modules.safetensors"):
        build_world_model({"path": str(tmp_path)})


def test_objective_loss_drops_after_one_training_step():
    m = tiny(48, seed=3).train()
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 48, 4, 2, 2, generator=g)
    acts = torch.rand(2, 13, 7, generator=g) * 2 - 1

    objective = FlowMatchObjective(context_noise_sigma=0.1)

    def loss(seed):
        return objective.loss(m, latents, acts, generator=torch.Generator().manual_seed(seed))

    params = [p for n, p in m.named_parameters() if not n.startswith("vae.")]
    opt = torch.optim.AdamW(params, lr=3e-3)
    before = loss(5)
    before.backward()
    opt.step()
    with torch.no_grad():
        after = loss(5)
    assert after.item() < before.item()
    with pytest.raises(ValueError, match="num_condition_latents"):
        objective.loss(m, latents, acts, num_condition_latents=4)
