"""experiment=wovr_libero_spatial from an imported release, on the CPU: tiny files in the
release's formats (the fork's DiT layout, Wan2.2's VAE .pth, RLinf's dataset/) go through the
importer, and one GRPO step of the WoVR recipe runs on them through wmrl.fit with only the
sizes overridden (the 5B world model and the 7B policy need a GPU)."""

from __future__ import annotations

import glob

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file, save_file
from test_rlinf_import import FIXTURES, release_dit

from wmrl.fit import fit
from wmrl.pipeline.rlinf.dit import import_dit
from wmrl.pipeline.rlinf.reset_data import import_reset_data
from wmrl.pipeline.rlinf.vae import import_vae

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread for the trainer in this process (its actors have theirs:
    rollout.worker_threads=1): a second one only waits for the first on a shared 2-core
    machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

TINY = [  # sizes only: the recipe (rewards, filter, threshold, KIR, clip, lr ...) stays
    "policy=openvla_oft_tiny", "reward.checkpoint=null", "reward.config.widths=[8,16,32,64]",
    "reward.config.image_size=[32,32]", "env.world_model.height=32", "env.world_model.width=32",
    "env.world_model.dtype=float32", "env.world_model.vae_dtype=float32", "env.device=cpu",
    "env.num_inference_steps=2", "rollout.num_envs=8", "rollout.rollout_epochs=1",
    "rollout.max_episode_steps=16", "rollout.worker_threads=1", "algorithm.global_batch=16",
    "algorithm.micro_batch=8", "trainer.max_steps=1", "logger=csv", "checkpoint.keep_last=0",
]


def test_wovr_experiment_runs_one_step_on_an_imported_release(tmp_path, monkeypatch, ray_local):
    release, imported = tmp_path / "release", tmp_path / "imported"
    release.mkdir()
    save_file(release_dit(), str(release / "model-00001.safetensors"))
    io = load_file(str(FIXTURES / "wan22_vae_tiny_io.safetensors"))
    import_dit([release / "model-00001.safetensors"], imported, num_heads=2, text_dim=8)
    import_vae(FIXTURES / "wan22_vae_tiny.pth", imported, io["latents_mean"].tolist(),
               io["latents_std"].tolist())
    info = import_reset_data(FIXTURES / "dataset", imported)
    monkeypatch.setenv("WMRL_WOVR_PATH", str(imported))
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        cfg = compose("fit", overrides=[f"run_dir={tmp_path / 'run'}",
                                        "experiment=wovr_libero_spatial", *TINY])
    assert cfg.env.initial_states == str(imported / "initial_states") and cfg.env.kir_reset
    assert list(cfg.algorithm.return_filter) == [0.5, 4.5] and cfg.rollout.temperature == 1.6
    trainer, module = fit(cfg)
    assert trainer.global_step == 1
    m = module.last_metrics
    assert 0 <= m["rollout/success"] <= 1 and m["rollout/episode_len"] > 0
    assert m["rollout/kept_groups"] in (0.0, 1.0)  # one group: kept or filtered whole
    assert glob.glob(str(tmp_path / "run" / "checkpoints" / "*.ckpt"))
    assert info["states"] == 5
