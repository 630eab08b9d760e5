"""The training objective: WoVR's, against the DiffSynth fork's own ``training_loss``; the
grid and its weights by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file

from wmrl.pipeline.rlinf.dit import dit_name, import_dit
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.objective import FlowMatchObjective, training_grid

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rlinf"


def test_training_grid_by_hand():
    sigmas, t, w = training_grid(shift=5.0)
    assert sigmas.shape == t.shape == w.shape == (1000,)
    assert sigmas[0] == 1.0  # u = 1
    u = 0.05  # i = 950: the fork's context timestep, 5 * 0.05 / 1.2
    assert math.isclose(float(sigmas[950]), 5 * u / (1 + 4 * u), rel_tol=1e-6)
    assert math.isclose(float(t[950]), 208.333, rel_tol=1e-5)
    assert math.isclose(float(w.sum()), 1000.0, rel_tol=1e-5)  # weights average 1
    y = [math.exp(-2 * ((float(ti) - 500) / 1000) ** 2) for ti in t]
    assert math.isclose(float(w[0]), (y[0] - min(y)) * 1000 / sum(v - min(y) for v in y),
                        rel_tol=1e-5)
    assert int(w.argmax()) == int((t - 500).abs().argmin())  # the weights peak at t = 500


def test_bf16_rounding_moves_the_lookup_to_the_nearest_grid_point():
    """t_i rounded to bf16 (spacing 4 in [512, 1024)) may sit nearer another grid point: the
    fork then noises with that point's sigma and weight and tells the model the rounded t."""
    sigmas, t, w = training_grid(5.0)
    i = 100
    told, sigma, weight = FlowMatchObjective.wovr()._lookup(torch.tensor([i]), 5.0,
                                                            torch.bfloat16)
    rounded = float(t[i].to(torch.bfloat16))
    assert float(told) == rounded != float(t[i])
    j = int((t - rounded).abs().argmin())
    assert (float(sigma), float(weight)) == (float(sigmas[j]), float(w[j]))


@pytest.fixture(scope="module")
def fork_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("wm")
    import_dit([FIXTURES / "rlinf_dit_tiny.safetensors"], root, num_heads=2, text_dim=16)
    torch.manual_seed(0)
    AutoencoderKLWan(base_dim=8, z_dim=8, dim_mult=[1, 2], num_res_blocks=1,
                     temperal_downsample=[True], latents_mean=[0.0] * 8,
                     latents_std=[1.0] * 8).save_pretrained(root / "vae")
    return ActionWanModel.from_pretrained(root).train()


@pytest.mark.parametrize("case,dtype", [("bs1", "float32"), ("b2", "bfloat16")])
def test_wovr_objective_equals_the_forks_training_loss(fork_model, case, dtype):
    """wovr_training_loss_tiny.safetensors: the fork's ``WanVideoPipeline.training_loss`` on
    the tiny fork DiT (make_wovr_training_loss_fixture.py): for the same latents, noise,
    actions and drawn timestep ids, the same loss, and the same gradient on every parameter
    of the fork's model (renamed as the import renames it)."""
    fx = load_file(str(FIXTURES / "wovr_training_loss_tiny.safetensors"))
    objective = FlowMatchObjective.wovr(timestep_dtype=dtype)
    latents, noise, actions = fx[f"{case}.latents"], fx[f"{case}.noise"], fx[f"{case}.actions"]
    b = latents.shape[0]
    for k, (tid, want) in enumerate(zip(fx[f"{case}.timestep_ids"], fx[f"{case}.losses"])):
        fork_model.zero_grad(set_to_none=True)
        loss = objective.loss(fork_model, latents, actions, noise=noise,
                              timestep_ids=tid.expand(b))
        assert math.isclose(loss.item(), float(want), rel_tol=1e-6), (k, loss.item(), float(want))
        if k:
            continue
        clean = FlowMatchObjective.wovr(timestep_dtype=dtype, context_timestep_index=None)
        with torch.no_grad():  # the context's noise is small but seen at this tolerance
            other = clean.loss(fork_model, latents, actions, noise=noise, timestep_ids=tid.expand(b))
        assert not math.isclose(other.item(), float(want), rel_tol=1e-6)
        loss.backward()
        params = dict(fork_model.named_parameters())
        grads = {n[len(case) + 6:]: g for n, g in fx.items() if n.startswith(f"{case}.grad.")}
        assert len(grads) == 73
        for name, want_g in grads.items():
            ours = ("action." + name if name.startswith("action_mlp")
                    else "transformer." + dit_name(name))
            got = params[ours].grad
            got = torch.zeros_like(want_g) if got is None else got.reshape(want_g.shape)
            scale = float(want_g.abs().max()) or 1.0
            assert (got - want_g).abs().max() <= 2e-5 * scale + 1e-9, name


def test_the_draws_per_batch_and_per_clip():
    obj = FlowMatchObjective.wovr()
    g = torch.Generator().manual_seed(0)
    ids = obj.draw_timestep_ids(3, g)
    assert ids.shape == (3,) and len(set(ids.tolist())) == 1  # the fork: one per batch
    ids = FlowMatchObjective().draw_timestep_ids(64, torch.Generator().manual_seed(0))
    assert len(set(ids.tolist())) > 40
    with pytest.raises(ValueError, match="objective.timestep_dtype"):
        FlowMatchObjective(timestep_dtype="fp8")
    with pytest.raises(ValueError, match="objective.context_timestep_index"):
        FlowMatchObjective(context_timestep_index=1000)
