"""The world-model fine-tune (wmrl.finetune.world_model_fit, WorldModelFinetune): a tiny
LeRobot dataset in, a world-model directory out; LoRA and full; resume; export."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from tests.tiny_models import pushed_square, tiny_world_model
from tests.two_ranks import launch_two_ranks
from wmrl.errors import ConfigError
from wmrl.eval.wm_fidelity import fidelity_report
from wmrl.finetune.world_model_clips import WorldModelClipData
from wmrl.finetune.world_model_fit import finetune_world_model
from wmrl.finetune.world_model_module import WorldModelFinetune, horizon_metrics
from wmrl.lerobot.writer import write_lerobot
from wmrl.world_model.action_wan import ActionWanModel

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = (17, 9, 12, 17)  # frames (= rows); T - 1 actions with a recorded outcome


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    tiny_world_model().save_pretrained(root / "wm")
    write_lerobot(root / "ds", (pushed_square(i, T) for i, T in enumerate(LENGTHS)), fps=10)
    return root


def finetune(cfg):
    """As scripts/finetune_world_model.py calls it: the fidelity report handed in."""
    return finetune_world_model(cfg, horizon_report=fidelity_report)


def compose_cfg(assets: Path, run: Path, *overrides: str):
    from omegaconf import open_dict

    import wmrl.build  # noqa: F401  (${wmrl_assets:})

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("finetune_world_model", overrides=[
            f"world_model.path={assets / 'wm'}", f"data.paths=[{assets / 'ds'}]",
            f"out_dir={run / 'out'}", "trainer.max_steps=3", "trainer.val_check_interval=2",
            "checkpoint.every_n_steps=2", "module.num_inference_steps=2", "logger=csv", *overrides])
    with open_dict(cfg):
        cfg.run_dir = str(run)
        cfg.logger.save_dir = str(run)
    return cfg


def metrics(run: Path) -> list[dict]:
    with open(run / "csv" / "version_0" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def assert_same_weights(a: Path, b: Path) -> None:
    """Two world-model directories hold the same tensors."""
    from safetensors.torch import load_file

    files = sorted(p.relative_to(a) for p in a.rglob("*.safetensors"))
    assert files == sorted(p.relative_to(b) for p in b.rglob("*.safetensors"))
    for f in files:
        x, y = load_file(str(a / f)), load_file(str(b / f))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), f


def test_clips_from_a_lerobot_dataset(assets):
    data = WorldModelClipData("lerobot", [str(assets / "ds")], batch_size=2, val_episodes=1)
    assert data.train_episodes == [0, 1, 2] and data.val_episodes == [3]
    # 16, 8, 11 actions -> 2 + 1 + 2 chunks of 8; the held-out episode's first 2
    assert len(data.val_dataloader().dataset) == 2
    clip = data.val_dataloader().dataset[0]
    assert clip["frames"].shape == (13, 32, 32, 3) and clip["actions"].shape == (13, 7)
    it = iter(data.train_dataloader())
    batches = [next(it) for _ in range(4)]  # the stream goes on past one pass (5 clips)
    assert all(b["frames"].shape == (2, 13, 32, 32, 3) for b in batches)
    with pytest.raises(ConfigError, match="data.val_episodes=4"):
        WorldModelClipData("lerobot", [str(assets / "ds")], val_episodes=4)
    with pytest.raises(ConfigError, match="data.paths: .* is not a folder"):
        WorldModelClipData("lerobot", [str(assets / "nowhere")])
    with pytest.raises(ConfigError, match="data.format='npz'"):
        WorldModelClipData("npz", [str(assets / "ds")])


def test_held_out_episodes_whole(assets, tmp_path):
    """The first held-out episodes as the replay takes them: frames, the actions with a recorded
    outcome, success labels on the frame they describe, the task."""
    data = WorldModelClipData("lerobot", [str(assets / "ds")], val_episodes=2)
    (ep,) = data.held_out_episodes(1)  # dataset episode 2 of 12 rows
    assert ep.frames.shape == (12, 32, 32, 3) and ep.task == "push the square"
    np.testing.assert_array_equal(ep.actions, pushed_square(2, 12)[1][:-1])
    assert len(data.held_out_episodes(5)) == 2  # at most data.val_episodes
    write_lerobot(tmp_path / "ds", (pushed_square(i, 9, successes=1 + 2 * i) for i in range(2)),
                  fps=10)
    (ep,) = WorldModelClipData("lerobot", [str(tmp_path / "ds")]).held_out_episodes(1)
    # rows 6, 7, 8 record success (next.success): frames 7 and 8 show it (row 8's is unrecorded)
    assert ep.success_labels.tolist() == [False] * 7 + [True] * 2


def test_validation_replays_the_first_held_out_episodes_whole(assets):
    """``horizon_episodes``: at each validation the first held-out episode (11 actions: 2
    chunks) replayed open loop; copy-the-first-frame's PSNR at the last chunk is the PSNR of
    frame 0 against the recorded frame 11 by hand; the trainable parameters still train after;
    0 logs nothing of it."""
    data = WorldModelClipData("lerobot", [str(assets / "ds")], val_episodes=2)
    (ep,) = data.held_out_episodes(1)

    def validate(horizon: int) -> tuple[WorldModelFinetune, dict]:
        module = WorldModelFinetune({"path": str(assets / "wm")}, num_inference_steps=2,
                                    horizon_episodes=horizon, horizon_report=fidelity_report)
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False,
                            enable_progress_bar=False, enable_model_summary=False)
        return module, trainer.validate(module, datamodule=data, verbose=False)[0]

    module, got = validate(1)
    first, last = (ep.frames[i].astype(np.float64) / 255 for i in (0, 11))
    by_hand = 10 * np.log10(1 / np.mean((first - last) ** 2))
    assert got["val/horizon_copy_first_psnr"] == pytest.approx(by_hand, abs=1e-4)
    assert got["val/horizon_chunks"] == 2 and got["val/horizon_episodes"] == 1
    assert 5 < got["val/horizon_psnr"] <= 100
    # one episode with the red square recorded: gone (1) or there (0, its error in px)
    gone = got["val/horizon_red_vanished"]
    assert gone in (0.0, 1.0) and ("val/horizon_red_median_px" in got) == (gone == 0.0)
    assert not any(k.startswith("val/horizon_blue") for k in got)  # no blue block recorded
    trainable = module.trainable_parameters().values()
    assert all(p.requires_grad for p in trainable)  # the env froze the model: restored
    module.model.transformer.train()
    again = module.horizon_figures([ep])  # the same noise: the same figures
    assert module.model.transformer.training and all(p.requires_grad for p in trainable)
    assert again == {k: pytest.approx(v) for k, v in got.items() if "horizon" in k}
    _, off = validate(0)
    assert "val/psnr" in off and not any("horizon" in k for k in off)


def test_horizon_metrics_leave_out_what_the_report_has_none_of():
    block = dict(median_px=None, mean_px=None, copy_first_median_px=None, recorded_present=0)
    report = {"n_episodes": 3, "n_chunks": 8, "chunks": [{}, {
        "psnr": 19.7, "copy_first_psnr": 19.5,
        "blocks": {"red": dict(block, vanished=1.0, recorded_present=3),
                   "blue": dict(block, median_px=2.5, vanished=0.0, recorded_present=3),
                   "green": dict(block, median_px=float("nan"), vanished=None)}}]}
    assert horizon_metrics(report) == {
        "val/horizon_psnr": 19.7, "val/horizon_copy_first_psnr": 19.5,
        "val/horizon_chunks": 8.0, "val/horizon_episodes": 3.0,
        "val/horizon_red_vanished": 1.0, "val/horizon_blue_median_px": 2.5,
        "val/horizon_blue_vanished": 0.0}


def test_lora_fit_resume_and_export(assets, tmp_path):
    run = tmp_path / "run"
    trainer, module = finetune(compose_cfg(assets, run, "+lora.rank=4"))
    assert trainer.global_step == 3
    rows = metrics(run)
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    # the Lightning path's curve before the one trainer's ``step`` (automatic optimization,
    # recorded at commit 2806f2c): the same
    assert losses == [0.07237900048494339, 2.778899908065796, 1.1462491750717163]
    val = [r for r in rows if r.get("val/psnr")]
    assert len(val) == 2  # the starting model (validate_first) and step 2
    for row in val:
        assert 5 < float(row["val/psnr"]) < 60
        assert 0 < float(row["val/ssim"]) <= 1 and float(row["val/copy_psnr"]) > 0
    assert val[0]["val/copy_psnr"] == val[1]["val/copy_psnr"]  # the same held-out clips
    # the yaml's horizon replay: the one held-out episode (16 actions: 2 chunks) whole
    for row in val:
        assert float(row["val/horizon_chunks"]) == 2 and float(row["val/horizon_episodes"]) == 1
        assert 5 < float(row["val/horizon_psnr"]) <= 100
        assert not any(k.startswith("val/horizon_blue") and row[k] for k in row)  # no blue
    assert val[0]["val/horizon_copy_first_psnr"] == val[1]["val/horizon_copy_first_psnr"]
    assert (run / "videos" / "step_0.gif").is_file() and (run / "videos" / "step_2.gif").is_file()
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    keys = set(ckpt["state_dict"])
    assert keys and all("lora_" in k or k.startswith("model.action.") for k in keys)
    assert not any(k.startswith("model.vae.") for k in keys)
    # exported: the adapters folded in, a plain world-model directory
    exported = ActionWanModel.from_pretrained(run / "out")
    assert not any("lora" in k for k in exported.state_dict())
    # resume at the last step: nothing more to train, the same weights come back
    finetune(compose_cfg(assets, run, "+lora.rank=4", "ckpt_path=last",
                         f"out_dir={tmp_path / 'again'}"))
    assert_same_weights(run / "out", tmp_path / "again")
    # resume: two more steps from last.ckpt (step 3)
    trainer2, _ = finetune(compose_cfg(assets, run, "+lora.rank=4", "trainer.max_steps=5",
                                       "ckpt_path=last", f"out_dir={tmp_path / 'out2'}"))
    assert trainer2.global_step == 5
    steps = [int(r["step"]) for r in metrics(run) if r.get("train/loss")]
    assert steps[-2:] == [3, 4]


def test_export_folds_the_adapters_into_the_dit(assets, tmp_path):
    module = WorldModelFinetune({"path": str(assets / "wm")}, lora={"rank": 4})
    module.configure_model()
    trainable = module.trainable_parameters()
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    assert not any(n.startswith("model.transformer.") and "lora_" not in n for n in trainable)
    with torch.no_grad():
        for n, p in trainable.items():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # B starts at 0: make the adapters change the output
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 4, 4, 4, generator=g)
    ts = torch.tensor([[0.0, 0.0, 700.0, 700.0]] * 2)
    acts = torch.rand(2, 13, 7, generator=g)
    base = ActionWanModel.from_pretrained(assets / "wm").eval()
    module.model.eval()
    with torch.no_grad():
        adapted, plain = module.model.velocity(x, ts, acts), base.velocity(x, ts, acts)
    assert (adapted - plain).abs().max() > 1e-2
    module.export(tmp_path / "out")
    with torch.no_grad():
        got = ActionWanModel.from_pretrained(tmp_path / "out").eval().velocity(x, ts, acts)
    torch.testing.assert_close(got, adapted, rtol=1e-4, atol=1e-5)


def test_own_context_clips_in_the_lightning_fine_tune(assets, tmp_path, monkeypatch):
    """module.own_context_fraction=0.5 of a batch of 2: one clip a step has the model's own
    imagined context; own_context_refresh=2 replays own_context_episodes=2 of the 3 training
    episodes through the model at steps 0 and 2 (not the held-out one); the losses differ from
    the plain fine-tune's, whose steps replay nothing."""
    import wmrl.finetune.world_model_module as M

    calls = []
    real = M.own_context_clips

    def spy(model, episodes, num_inference_steps, seed):
        calls.append(([len(e.frames) for e in episodes], model.training, num_inference_steps))
        return real(model, episodes, num_inference_steps, seed)

    monkeypatch.setattr(M, "own_context_clips", spy)
    losses = {}
    for name, frac in (("plain", 0.0), ("own", 0.5)):
        calls.clear()
        run = tmp_path / name
        finetune(compose_cfg(assets, run, "data.batch_size=2", "lora=null",
                             f"module.own_context_fraction={frac}",
                             "module.own_context_refresh=2", "module.own_context_episodes=2"))
        losses[name] = [float(r["train/loss"]) for r in metrics(run) if r.get("train/loss")]
        if frac:  # two replays of 2 training episodes (17, 9 or 12 frames), in eval mode
            assert len(calls) == 2 and all(len(c[0]) == 2 and set(c[0]) <= {17, 9, 12}
                                           and not c[1] and c[2] == 2 for c in calls)
        else:
            assert calls == []
    assert len(losses["own"]) == len(losses["plain"]) == 3
    assert losses["own"][0] != losses["plain"][0]


def test_full_finetune_step_learns_and_saves_no_vae(assets):
    """Full fine-tune: the DiT and action modules train, the VAE stays frozen; 15 AdamW steps
    on one batch lower the loss at fixed draws."""
    module = WorldModelFinetune({"path": str(assets / "wm")}, lr=3e-3)
    module.configure_model()
    names = set(module.trainable_parameters())
    assert any(n.startswith("model.transformer.") for n in names)
    assert any(n.startswith("model.action.") for n in names)
    assert not any(n.startswith("model.vae.") for n in names)
    data = WorldModelClipData("lerobot", [str(assets / "ds")], batch_size=2)
    batch = next(iter(data.train_dataloader()))
    latents = module._latents(batch["frames"])

    def loss_at_fixed_draws():
        gen = torch.Generator().manual_seed(7)
        return module.objective.loss(module.model, latents, batch["actions"], 2, gen)

    with torch.no_grad():
        before = loss_at_fixed_draws().item()
    opt = torch.optim.AdamW(module.trainable_parameters().values(), lr=3e-3)
    for step in range(15):
        opt.zero_grad()
        module.objective.loss(module.model, latents, batch["actions"], 2,
                              torch.Generator().manual_seed(step)).backward()
        opt.step()
    with torch.no_grad():
        after = loss_at_fixed_draws().item()
    assert after < 0.8 * before, (before, after)


def test_bad_settings_fail_before_the_model_loads(assets):
    with pytest.raises(ConfigError, match="objective.preset='diffsynth'"):
        WorldModelFinetune({"path": "x"}, objective={"preset": "diffsynth"})
    with pytest.raises(ConfigError, match="lora.rank=0"):
        WorldModelFinetune({"path": "x"}, lora={"rank": 0})
    with pytest.raises(ConfigError, match="objective: .*unexpected keyword"):
        WorldModelFinetune({"path": "x"}, objective={"preset": "wovr", "sigma": 1})
    from wmrl.finetune.world_model_module import train_stage

    with pytest.raises(ConfigError, match="transformer_train: unknown settings \\['warmup'\\]"):
        train_stage(tiny_world_model(), "dit", {"steps": 1, "batch_size": 1, "warmup": 2},
                    None, 0)
    with pytest.raises(ConfigError, match="horizon_episodes=2 needs horizon_report"):
        WorldModelFinetune({"path": "x"}, horizon_episodes=2)
    with pytest.raises(ConfigError, match="horizon_episodes=-1 must be >= 0"):
        WorldModelFinetune({"path": "x"}, horizon_episodes=-1, horizon_report=fidelity_report)
    with pytest.raises(ConfigError, match="lr_schedule='linear'"):
        WorldModelFinetune({"path": "x"}, lr_schedule="linear")
    with pytest.raises(ConfigError, match="part='transformer'"):
        WorldModelFinetune({"path": "x"}, part="transformer")
    with pytest.raises(ConfigError, match="grad_clip=0"):
        WorldModelFinetune({"path": "x"}, grad_clip=0)
    with pytest.raises(ConfigError, match="lora is for the DiT"):
        WorldModelFinetune({"path": "x"}, part="vae", lora={"rank": 4})
    with pytest.raises(ConfigError, match="objective \\(part=vae\\): .*clip_frames"):
        WorldModelFinetune({"path": "x"}, part="vae", objective={"clip_frames": 6})


def finetune_two_ranks(cwd: Path, *overrides: str) -> None:
    """scripts/finetune_world_model.py on 2 CPU ranks started at once (tests/two_ranks.py)."""
    launch_two_ranks([sys.executable, ROOT / "scripts" / "finetune_world_model.py", *overrides],
                     cwd=cwd, timeout=300)


@pytest.mark.slow
def test_lora_finetune_sharded_over_two_ranks_resumes(assets, tmp_path):
    """strategy=world_model_shard (HybridShardStrategy, FSDP2 over the DiT blocks, gloo): the
    checkpoint is a DCP folder of the adapters and action modules only; a resume restores
    them (resumed at its last step, the export is the same tensors) and trains on. Half of
    each rank's batch of 2 is own-context clips (replayed at steps 0 and 2 from the same
    training episodes on both ranks: the sharded model needs the same forwards)."""
    from strategies.checkpoint import load_full_state_dict

    run = tmp_path / "run"
    common = [f"world_model.path={assets / 'wm'}", f"data.paths=[{assets / 'ds'}]",
              "trainer.val_check_interval=2", "checkpoint.every_n_steps=2",
              "module.num_inference_steps=2", "+lora.rank=4", "strategy=world_model_shard",
              "trainer.devices=2", f"hydra.run.dir={run}", "data.batch_size=2",
              "module.own_context_fraction=0.5", "module.own_context_refresh=2",
              "module.own_context_episodes=2"]
    finetune_two_ranks(tmp_path, *common, "trainer.max_steps=3", f"out_dir={tmp_path / 'a'}")
    last = run / "checkpoints" / "last.ckpt"
    assert (last / ".metadata").is_file()  # sharded: one DCP folder
    keys = set(load_full_state_dict(last))
    assert keys and all("lora_" in k or k.startswith("model.action.") for k in keys)
    finetune_two_ranks(tmp_path, *common, "trainer.max_steps=3", "ckpt_path=last",
                     f"out_dir={tmp_path / 'b'}")
    assert_same_weights(tmp_path / "a", tmp_path / "b")
    finetune_two_ranks(tmp_path, *common, "trainer.max_steps=4", "ckpt_path=last",
                     f"out_dir={tmp_path / 'c'}")
    steps = [int(r["step"]) for r in metrics(run) if r.get("train/loss")]
    assert steps == [0, 1, 2, 3]  # rank 0 logs; the resumed run went on at step 3
    assert any(r.get("val/psnr") for r in metrics(run))
    # the horizon replay on the sharded model (every rank the same calls); its flags restored:
    # the action modules still train, so the resumes above found their optimizer state
    assert any(r.get("val/horizon_psnr") for r in metrics(run))
    ActionWanModel.from_pretrained(tmp_path / "c")


def test_finetune_starts_from_an_imported_wovr_checkpoint(tmp_path):
    """The fork's tiny DiT imported (scripts/import_rlinf.py's import_dit) + a VAE: a LoRA
    fine-tune step under WoVR's objective moves it, and the export loads."""
    from diffusers import AutoencoderKLWan

    from wmrl.pipeline.rlinf.dit import import_dit

    fixtures = ROOT / "tests" / "fixtures" / "rlinf"
    import_dit([fixtures / "rlinf_dit_tiny.safetensors"], tmp_path / "wm", num_heads=2,
               text_dim=16)
    torch.manual_seed(0)
    AutoencoderKLWan(base_dim=8, z_dim=8, dim_mult=[1, 2, 2], num_res_blocks=1,
                     temperal_downsample=[True, True], scale_factor_spatial=4,
                     latents_mean=[0.0] * 8, latents_std=[1.0] * 8,
                     ).save_pretrained(tmp_path / "wm" / "vae")  # 13 frames -> 4 latents
    module = WorldModelFinetune({"path": str(tmp_path / "wm")}, lora={"rank": 4}, lr=1e-2)
    module.configure_model()
    g = torch.Generator().manual_seed(0)
    batch = {"frames": torch.randint(0, 256, (2, 13, 32, 32, 3), generator=g, dtype=torch.uint8),
             "actions": torch.rand(2, 13, 7, generator=g) * 2 - 1}
    opt = module.make_optimizer()
    before = {n: p.detach().clone() for n, p in module.trainable_parameters().items()}
    loss = module.latent_loss(module._latents(batch["frames"]), batch["actions"], g)
    loss.backward()
    opt.step()
    moved = [n for n, p in module.trainable_parameters().items() if not torch.equal(p, before[n])]
    assert any("lora_B" in n for n in moved) and any(n.startswith("model.action.") for n in moved)
    module.export(tmp_path / "out")
    assert ActionWanModel.from_pretrained(tmp_path / "out").transformer.config.num_layers == 2


# Per-step losses and weight checksums (float64 sum of the trained parameters) of the loops
# the one trainer replaced, recorded at commit 2806f2c (/tmp record: ``train_vae``,
# ``train_transformer`` and ``Pace.finetune`` on ``_clips()`` with the settings below). The
# trainer reproduces them bit for bit: the same draws from one generator in the same order
# (clip indices, then the objective's), the same AdamW, clip and lr products.
OLD_LOOPS = {
    "vae_default": ([0.9501998424530029, 0.8897945284843445, 0.8644524216651917,
                     0.8545405864715576], 448.12862387880546),
    "vae_fg": ([0.9550865888595581, 0.8805680871009827, 0.8610642552375793,
                0.8484400510787964], 448.26517768106714),
    "dit_default": ([1.4314765930175781, 1.3967182636260986, 1.288434624671936,
                     1.2530364990234375, 1.243388295173645], 67.4181825046544),
    "dit_all": ([1.407349705696106, 1.357715368270874, 1.3719677925109863,
                 1.3144276142120361, 1.1980140209197998], 67.77929294652859),
    "pace_default": ([1.5346366167068481, 1.290952205657959, 1.281702995300293,
                      1.2044636011123657, 1.1850510835647583, 1.0428417921066284],
                     66.41678398783552),
    "pace_event": ([1.478488802909851, 1.3401483297348022, 1.3516132831573486,
                    1.20830237865448, 1.2110471725463867, 1.0802397727966309],
                   67.48695181957737),
}
# conf/train_world_model.yaml's recipe at tiny sizes (train_vae's warm-up: max(1, steps // 20))
VAE_STAGE = dict(steps=4, batch_size=2, log_every=0, lr=2e-3, lr_schedule="cosine",
                 warmup_steps=1, lr_min_ratio=0.1, grad_clip=1.0)
DIT_STAGE = dict(steps=5, batch_size=4, log_every=0, lr=3e-3, weight_decay=0.01,
                 betas=[0.9, 0.99], lr_schedule="cosine", warmup_steps=2, lr_min_ratio=0.1,
                 grad_clip=1.0)


def _clips():
    from wmrl.finetune.world_model import ClipSet

    g = torch.Generator().manual_seed(0)
    n = 6
    frames = torch.randint(0, 256, (n, 13, 32, 32, 3), dtype=torch.uint8, generator=g)
    acts = torch.rand(n, 13, 7, generator=g) * 2 - 1
    acts[1, 8:, 6], acts[1, :8, 6] = 1.0, -1.0  # a gripper event
    return ClipSet(frames, acts, torch.arange(n), torch.zeros(n, dtype=torch.long))


def _checksum(params) -> float:
    return float(sum(p.detach().double().sum() for p in params))


def test_one_trainer_reproduces_the_asset_build_and_pace_loops():
    """The asset build's two stages (``train_stage``) and PACE's refresh (two rounds on one
    optimizer) through ``WorldModelFinetune`` give the old loops' losses and weights exactly."""
    from tests.tiny_models import tiny_world_model_config
    from wmrl.finetune.world_model import encode_clips
    from wmrl.finetune.world_model_module import train_stage
    from wmrl.pace.round import Pace

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (as recorded)
    try:
        clips, got = _clips(), {}
        for name, obj in {"vae_default": {},
                          "vae_fg": dict(clip_frames=9, foreground_weight=10.0)}.items():
            m = tiny_world_model()
            losses = train_stage(m, "vae", dict(VAE_STAGE, objective=obj), clips, 3, None)
            got[name] = losses, _checksum(m.vae.parameters())
        for name, kw in {"dit_default": dict(objective={"preset": "tabletop"}),
                         "dit_all": dict(objective=dict(preset="tabletop", context_noise_sigma=0.1,
                                                        foreground_weight=1.0),
                                         gripper_event_weight=2.0)}.items():
            m = tiny_world_model()
            data = (encode_clips(m, clips), clips.actions)
            losses = train_stage(m, "dit", dict(DIT_STAGE, **kw), data, 3, None)
            got[name] = losses, _checksum([*m.transformer.parameters(), *m.action.parameters()])
        for name, kw in {"pace_default": {},
                         "pace_event": dict(gripper_event_weight=2.0,
                                            foreground_weight=1.0)}.items():
            p = Pace(tiny_world_model_config(), ["red_on_plate"], steps=3, batch_size=4, lr=3e-3,
                     seed=2, context_noise_sigma=0.1, out_dir=None, verbose=False, **kw)
            m = p.ensure_models()
            lat = encode_clips(m, clips)
            losses = p.finetune(lat, clips.actions, 1) + p.finetune(lat, clips.actions, 2)
            got[name] = losses, _checksum([*m.transformer.parameters(), *m.action.parameters()])
    finally:
        torch.set_num_threads(threads)
    assert got == OLD_LOOPS
