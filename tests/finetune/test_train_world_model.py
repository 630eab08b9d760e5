"""World-model training: metrics by hand, clips of every chunk, and a tiny
collect -> VAE + transformer fit -> save -> WanWorldModelEnv(from_pretrained) pipeline."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (registers ${wmrl_assets:}, as the script does)
from wmrl.finetune import world_model as T
from wmrl.finetune.image_metrics import psnr, ssim
from wmrl.finetune.reward_data import reward_frames_from_trajectories
from wmrl.finetune.world_model_build import build_world_model
from wmrl.sim.dataset import Episode, TrajectoryWriter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread (as the script's ``threads=1``): at these sizes a second thread only
    waits for the first, ~10x slower on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_psnr_ssim_hand_checked():
    x = torch.full((2, 3, 16, 16), 0.5)
    y = torch.full((2, 3, 16, 16), 0.6)  # MSE 0.01 -> 10 log10(1 / 0.01) = 20 dB
    assert torch.allclose(psnr(x, y), torch.tensor([20.0, 20.0]), atol=1e-4)
    # constant images: SSIM = (2*.5*.6 + C1) C2 / ((.25 + .36 + C1) C2), C1 = 1e-4
    assert torch.allclose(ssim(x, y), torch.tensor((0.6 + 1e-4) / (0.61 + 1e-4)), atol=1e-5)
    img = torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(0))
    assert ssim(img, img).item() == pytest.approx(1.0, abs=1e-5)
    assert psnr(img, img).item() == 100.0  # capped: means over frames stay finite
    assert ssim(img, 1 - img).item() < 0  # anti-correlated structure
    with pytest.raises(ValueError, match="equal shape"):
        psnr(x, y[:1])
    # the figures of the project's earlier hand-written metrics (valid-window SSIM) on a noisy
    # 64x64 pair: PSNR the same, SSIM within 5e-4 (torchmetrics also averages the border)
    g = torch.Generator().manual_seed(0)
    a = torch.rand(2, 3, 64, 64, generator=g)
    b = (a + 0.1 * torch.randn(2, 3, 64, 64, generator=g)).clamp(0, 1)
    assert psnr(a, b).tolist() == pytest.approx([20.507092, 20.466612], abs=1e-4)
    assert ssim(a, b).tolist() == pytest.approx([0.945673, 0.944919], abs=5e-4)


def _episode(t_len: int) -> Episode:
    frames = np.arange(t_len + 1, dtype=np.uint8)[:, None, None, None] * np.ones(
        (1, 2, 2, 3), np.uint8)  # frame t is filled with value t
    actions = np.zeros((t_len, 7), np.float32)
    actions[:, 0] = np.arange(t_len) / 100  # a_t[0] = t / 100
    actions[:, 6] = 1.0
    return Episode(frames, actions, np.zeros(t_len + 1, bool), "task")


def test_clips_of_every_chunk():
    """``build_clips``: one clip per chunk of each episode (the layout itself:
    tests/world_model/test_clip_layout.py)."""
    ep = _episode(20)
    clips = T.build_clips([ep, _episode(8)])
    assert len(clips) == 4 and clips.start.tolist() == [0, 8, 16, 0]
    assert clips.frames[2, 5:, 0, 0, 0].tolist() == [17, 18, 19, 20, 20, 20, 20, 20]
    assert clips.video([0]).shape == (1, 3, 13, 2, 2)
    assert clips.video([0]).min() == -1.0


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from wmrl.sim.episodes import EpisodeSpec, rollout_episodes
    from wmrl.sim.expert import ScriptedExpert
    from wmrl.sim.tabletop import TabletopVecEnv, task_by_name

    root = tmp_path_factory.mktemp("wm")
    vec = TabletopVecEnv(3, image_size=32, max_episode_steps=12)
    task = task_by_name("red_on_plate").instruction
    try:
        with TrajectoryWriter(root / "data", (32, 32), [task], state_dim=25) as w:
            specs = [EpisodeSpec("red_on_plate", seed=i) for i in range(3)]
            for ep in rollout_episodes(vec, ScriptedExpert(noise_std=0.3), specs):
                w.add(ep)
    finally:
        vec.close()
    return root


def test_reward_frames_from_trajectories(tiny_data):
    frames, labels, ids, tasks = reward_frames_from_trajectories(tiny_data / "data")
    assert frames.shape == (3 * 13, 32, 32, 3) and frames.dtype == np.uint8
    assert labels.shape == ids.shape == (39,) and tasks == ["put the red block on the green plate"]
    f2, l2, _, _ = reward_frames_from_trajectories([tiny_data / "data"], negative_stride=4)
    # every success frame kept, every 4th failure frame of each episode (ceil(13 / 4) = 4)
    assert l2.sum() == labels.sum() and len(f2) == 3 * 4
    with pytest.raises(ValueError, match="no episodes"):
        reward_frames_from_trajectories(tiny_data / "data", tasks=["red_left"])


def test_tiny_train_pipeline_loads_into_env(tiny_data, tmp_path):
    from wmrl.envs.wan_env import WanWorldModelEnv
    from wmrl.rewards.resnet import ResNetSuccessReward, build_classifier, save_checkpoint

    reward_dir = tmp_path / "reward"
    rcfg = {"widths": [4, 4, 4, 4], "blocks_per_stage": 1, "image_size": [32, 32]}
    save_checkpoint(build_classifier("resnet", rcfg), {"arch": "resnet", **rcfg}, reward_dir)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train_world_model", overrides=["train_dirs=[]", "out_dir=none"])
    cfg = OmegaConf.to_container(cfg, resolve=True)
    data = str(tiny_data / "data")
    cfg.update(train_dirs=[data], val_dirs=[data], out_dir=str(tmp_path / "wm"), threads=1,
               tasks=["red_on_plate"])
    cfg["model"].update(height=32, width=32)  # the shipped VAE layout, a 1-layer 16-wide DiT
    cfg["model"]["transformer"].update(attention_head_dim=8, ffn_dim=16, num_layers=1)
    cfg["vae_train"].update(steps=10, batch_size=2, lr=3e-3, log_every=0)
    cfg["transformer_train"].update(steps=20, batch_size=8, lr=3e-3, warmup_steps=2,
                                    log_every=0, gripper_event_weight=2.0)
    cfg["transformer_train"]["objective"]["foreground_weight"] = 1.0
    cfg["eval"].update(max_clips=4, reward_checkpoint=str(reward_dir), replay_episodes=3,
                       max_episode_steps=16)
    cfg["initial_states"].update(out_dir=str(tmp_path / "init"), tasks=["red_on_plate"],
                                 num_states=2)
    m = build_world_model(cfg, log=None)

    assert m["train_episodes"] == 3 and m["train_clips"] == 6  # 12 steps -> chunks at 0, 8
    assert m["vae_loss_last"] < m["vae_loss_first"]
    assert m["dit_loss_last"] < m["dit_loss_first"]
    for k in ("vae_psnr", "next_chunk_psnr", "next_chunk_copy_psnr", "next_chunk_ssim"):
        assert math.isfinite(m[k])
    assert m["replay_episodes"] == 3 and 0 <= m["replay_agreement"] <= 1
    assert m["replay_tp"] + m["replay_tn"] + m["replay_fp"] + m["replay_fn"] == 3
    tpr = m["replay_tp"] / max(m["replay_tp"] + m["replay_fn"], 1)
    tnr = m["replay_tn"] / max(m["replay_tn"] + m["replay_fp"], 1)
    assert m["replay_balanced_accuracy"] == pytest.approx(0.5 * (tpr + tnr))
    sweep = m["replay_by_threshold"]  # one replay, every threshold: success only gets rarer
    assert list(sweep) == ["0.5", "0.9", "0.99", "0.999"]
    assert sweep["0.99"]["tp"] == m["replay_tp"] and sweep["0.99"]["fp"] == m["replay_fp"]
    rates = [v["wm_success"] for v in sweep.values()]
    assert rates == sorted(rates, reverse=True)
    assert json.loads((tmp_path / "wm" / "metrics.json").read_text())["train_clips"] == 6

    env = WanWorldModelEnv({"path": str(tmp_path / "wm"), "height": 32, "width": 32},
                           ResNetSuccessReward(checkpoint=str(reward_dir)),
                           str(tmp_path / "init"), num_envs=2, group_size=1,
                           return_frames=True)
    obs = env.reset(state_ids=[0, 1])
    assert obs["task"] == ["put the red block on the green plate"] * 2
    obs, rew, term, trunc, info = env.chunk_step(torch.zeros(2, 8, 7))
    assert obs["image"].shape == (2, 32, 32, 3) and rew.shape == (2, 8)
    assert info["frames"].shape == (2, 8, 32, 32, 3)
    assert torch.equal(info["frames"][:, -1], obs["image"])  # the observation = last new frame

    # the initial states are the simulator's eval scenes
    from wmrl.sim.tabletop import initial_frames

    frames, _ = initial_frames("red_on_plate", 2, seed=0, image_size=32)
    assert torch.equal(env.states.frames, torch.from_numpy(frames))

    # imagined frames for the reward: one per simulator step 1..12 of each 12-step episode,
    # labelled with the simulator's label of the same step
    from wmrl.finetune.reward_data import imagined_frames
    from wmrl.sim.dataset import TrajectoryDataset

    f, y, ids, names = imagined_frames(data, tmp_path / "wm", 5, batch_size=2)
    sim = np.concatenate([ep.success_labels[1:] for ep in TrajectoryDataset(data)])
    assert f.shape == (36, 32, 32, 3) and f.dtype == np.uint8 and ids.tolist() == [0] * 36
    assert y.tolist() == sim.astype(np.uint8).tolist() and names == obs["task"][:1]
    # replay of episode 0 through an env: the same frames for its first chunk
    ep0 = next(iter(TrajectoryDataset(data)))
    from wmrl.finetune import world_model as T
    from wmrl.finetune.reward_data import _NeverSuccess
    from wmrl.world_model.clip_layout import chunk_actions

    env = WanWorldModelEnv({"path": str(tmp_path / "wm"), "height": 32, "width": 32},
                           _NeverSuccess(), T.episode_initial_states([ep0]),
                           num_envs=1, max_episode_steps=16, seed=0, return_frames=True)
    env.reset(state_ids=[0])
    first = env.chunk_step(torch.from_numpy(chunk_actions(ep0.actions, 0))[None])[4]["frames"]
    # (batch size 2 vs 1: convolutions may round differently, so not bit-exact)
    assert np.abs(f[:8].astype(int) - first[0].numpy().astype(int)).max() <= 2


def test_success_confusion_hand_checked():
    wm = np.array([1, 1, 1, 0, 0, 1], bool)   # imagined
    sim = np.array([1, 0, 0, 0, 1, 1], bool)  # simulator
    c = T.success_confusion(wm, sim)
    assert (c["tp"], c["tn"], c["fp"], c["fn"]) == (2, 1, 2, 1)
    # TPR 2/3, TNR 1/3 -> 0.5: this world model's success says nothing
    assert c["balanced_accuracy"] == pytest.approx(0.5)
    assert c["agreement"] == pytest.approx(0.5) and c["wm_success"] == pytest.approx(4 / 6)


def test_foreground_weights_hand_checked():
    from wmrl.world_model.objective import foreground_weights

    last = torch.zeros(1, 2, 1, 1, 2)  # [B, C, T, h, w]: two cells
    new = torch.zeros(1, 2, 1, 1, 2)
    new[0, :, 0, 0, 1] = 2.0  # the second cell changes by 2 in both channels: d = [0, 2]
    w = foreground_weights(new, last, strength=3.0)
    # d / mean(d) = [0, 2] -> weights 1 + 3 * [0, 2] = [1, 7], mean 1 + a = 4
    assert w.shape == (1, 1, 1, 1, 2)
    assert w.flatten().tolist() == [1.0, 7.0]
    # a static clip gets weight 1 everywhere (no division by zero)
    assert foreground_weights(last, last, 3.0).flatten().tolist() == [1.0, 1.0]


def test_gripper_event_clips_are_drawn_more_often():
    from wmrl.finetune.world_model import clip_sampling_weights

    acts = -torch.ones(3, 13, 7)  # gripper open throughout
    acts[1, 8:, 6] = 1.0  # closes mid-chunk: a grasp
    acts[2, :, 6] = 1.0  # closed throughout (carrying): no event
    acts[2, 2, 6] = -1.0  # a flip inside the condition frames before the last one: not counted
    assert clip_sampling_weights(acts, 4.0).tolist() == [1.0, 4.0, 1.0]
    with pytest.raises(ValueError, match="gripper_event_weight"):
        clip_sampling_weights(acts, 0.0)


def test_prediction_quality_tells_whether_actions_matter():
    from wmrl.world_model.action_wan import build_world_model

    cfg = dict(transformer=dict(patch_size=[1, 1, 1], num_attention_heads=2, attention_head_dim=8,
                                in_channels=16, out_channels=16, text_dim=16, freq_dim=32,
                                ffn_dim=32, num_layers=1, rope_max_seq_len=32),
               vae=dict(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                        temperal_downsample=[False, True, True]),
               action=dict(num_text_tokens=1), init_seed=0)
    model = build_world_model(cfg).eval()
    g = torch.Generator().manual_seed(0)
    n = 4
    clips = T.ClipSet(torch.randint(0, 256, (n, 13, 16, 16, 3), dtype=torch.uint8, generator=g),
                      torch.rand(n, 13, 7, generator=g) * 2 - 1, torch.arange(n),
                      torch.zeros(n, dtype=torch.long))
    with torch.no_grad():
        m = T.prediction_quality(model, clips, num_inference_steps=2, batch_size=n)
        assert m["next_chunk_psnr"] != m["next_chunk_psnr_other_actions"]
        one = T.prediction_quality(model, clips, num_inference_steps=2, batch_size=1)
        assert one["next_chunk_psnr"] != one["next_chunk_psnr_other_actions"]  # not own actions
        for mlp in (model.action.action_mlp1, model.action.action_mlp2):
            mlp[-1].weight.zero_()
            mlp[-1].bias.zero_()  # now every action maps to the same tokens and time shift
        m = T.prediction_quality(model, clips, num_inference_steps=2, batch_size=n)
    assert m["next_chunk_psnr"] == m["next_chunk_psnr_other_actions"]
    assert math.isfinite(m["next_chunk_copy_psnr"]) and -1 <= m["next_chunk_ssim"] <= 1
