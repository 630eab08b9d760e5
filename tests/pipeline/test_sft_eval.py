"""SFT targets and statistics, the BC loop, SimEvalCallback and scripts/eval.py."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from callbacks.sim_eval import SimEvalCallback
from wmrl.eval.evaluate import evaluate_policy, mixed_group_fraction
from wmrl.eval.policy_checkpoint import load_policy, policy_state_from_ckpt
from wmrl.eval.results import format_table, run_eval
from wmrl.pipeline import sft
from wmrl.policies.action_tokenizer import ActionStats
from wmrl.policies.configs import tiny_config
from wmrl.policies.openvla_oft import build_policy

ROOT = Path(__file__).resolve().parents[2]
STATS = {"action": {"q01": [-0.5] * 6 + [0.0], "q99": [0.5] * 6 + [1.0],
                    "mask": [True] * 6 + [False]}}
ENV = {"image_size": [32, 32], "max_episode_steps": 8}


def tabletop_policy(seed: int = 0):
    cfg = tiny_config(image_size=32)
    cfg["norm_stats"] = {"tabletop": STATS}
    return build_policy(config=cfg, unnorm_key="tabletop", seed=seed)


def test_statistics_hand_numbers():
    a = np.zeros((101, 7))
    a[:, 0] = np.linspace(-1, 1, 101)  # q01 = -0.98, q99 = 0.98 (linear interpolation)
    a[:, 6] = np.where(np.arange(101) < 25, 1.0, -1.0)  # 25 close, 76 open
    s = sft.action_statistics(a, num_trajectories=2)["action"]
    assert s["q01"][0] == pytest.approx(-0.98) and s["q99"][0] == pytest.approx(0.98)
    assert s["q01"][1] == s["q99"][1] == 0.0
    assert s["mean"][6] == pytest.approx(76 / 101)  # gripper as OpenVLA's [0 close, 1 open]
    assert s["mask"] == [True] * 6 + [False]


def test_bins_round_trip_within_a_bin():
    # x = 2 (0.25 + 0.5) / 1 - 1 = 0.5 -> digitize over linspace(-1,1,256) = 192 -> bin 191;
    # centre 191 = -1 + 383/255 = 0.50196 -> 0.5 * 1.50196 - 0.5 = 0.25098
    a = np.array([[0.25, -0.5, 0.0, 0.9, 0.1, -0.2, -1.0],   # 0.9: clipped to q99
                  [0.0, 0.5, -0.25, 0.0, 0.0, 0.0, 1.0]])
    bins = sft.actions_to_bins(a, STATS)
    assert bins[0, 0] == 191 and bins[0, 6] == 255 and bins[1, 6] == 127
    dec = ActionStats({"t": STATS}, "t", 7).decode(torch.from_numpy(bins), 256, "libero").numpy()
    assert dec[0, 0] == pytest.approx(0.25098, abs=1e-4)
    expect = np.clip(a[:, :6], -0.5, 0.5)
    assert np.abs(dec[:, :6] - expect).max() <= 1.0 / 255 + 1e-6  # one bin width (env units)
    assert dec[:, 6].tolist() == [-1.0, 1.0]  # open stays open, close stays close


@pytest.fixture(scope="module")
def demos():
    from wmrl.sim.episodes import EpisodeSpec, rollout_episodes
    from wmrl.sim.expert import ScriptedExpert
    from wmrl.sim.tabletop import TabletopVecEnv

    vec = TabletopVecEnv(3, image_size=32, max_episode_steps=24)
    try:
        specs = [EpisodeSpec(t, seed=i) for i, t in
                 enumerate(["red_on_plate", "blue_on_plate", "red_left"])]
        return list(rollout_episodes(vec, ScriptedExpert(), specs))
    finally:
        vec.close()


def test_chunk_dataset_targets(demos):
    stats = sft.action_statistics(np.concatenate([e.actions for e in demos]))
    data = sft.ChunkBCDataset(demos, stats, chunk=8, success_only=False)
    assert len(data) == sum(len(e) for e in demos) and data.bins.shape[1] == 56
    e = demos[0]
    last = len(e) - 1  # the final sample's chunk repeats the episode's last action 8 times
    tail = data.bins[last].view(8, 7)
    assert torch.equal(tail, tail[:1].expand(8, 7))
    assert torch.equal(data.bins[0].view(8, 7)[1], torch.from_numpy(
        sft.actions_to_bins(e.actions[1], stats)))
    # a noise-free expert's relabelled actions are the executed ones
    np.testing.assert_allclose(sft.expert_labels(e), e.actions, atol=1e-6)


def test_bc_reduces_loss(demos):
    torch.manual_seed(0)
    stats = sft.action_statistics(np.concatenate([e.actions for e in demos]))
    policy = tabletop_policy()
    data = sft.ChunkBCDataset(demos, stats, success_only=False)
    probe = torch.arange(0, len(data), max(1, len(data) // 32))
    obs, bins = data.batch(probe)
    with torch.no_grad():
        before, _ = sft.bc_loss(policy, obs, bins)
    rows = sft.train_bc(policy, data, steps=25, batch_size=16, lr=2e-3, warmup=5, log_every=25)
    with torch.no_grad():
        after, _ = sft.bc_loss(policy, obs, bins)
    assert before.item() > 5.0  # ~ log(256) = 5.55 at random init
    assert after.item() < 0.7 * before.item()
    assert rows[-1]["step"] == 25 and not policy.training


def test_evaluate_policy_deterministic(capsys):
    policy = tabletop_policy()
    kw = dict(tasks=["red_on_plate"], episodes_per_task=2, temperature=1.0, num_envs=2,
              num_videos=2, env=ENV)
    r1 = evaluate_policy(policy, seed=3, progress="sim eval", **kw)
    assert "sim eval:   0%|          | 0/2" in capsys.readouterr().out  # a bar of 2 episodes
    r2 = evaluate_policy(policy, seed=3, **kw)
    r3 = evaluate_policy(policy, seed=4, **kw)
    assert r1.episodes == 2 and set(r1.success) == {"red_on_plate"}
    lo, hi = r1.interval()  # the 95% Wilson interval of k of 2, logged beside the rate
    assert lo <= r1.overall <= hi and r1.metrics()["sim/ci95_low"] == lo
    assert r1.describe().endswith(f"[{100 * lo:.1f}, {100 * hi:.1f}] of 2")
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(r1.videos, r2.videos))
    assert not np.array_equal(r1.videos[0][1], r3.videos[0][1])  # the seed reaches sampling
    assert mixed_group_fraction([1, 0, 1, 1, 0, 0, 0, 0], 4) == 0.5


class _PolicyModule(L.LightningModule):
    """Minimal module with a ``policy`` attribute: a BC step on one fixed batch."""

    def __init__(self):
        super().__init__()
        self.policy = tabletop_policy()
        self.history = []  # like GRPOModule: the world model's success per training step
        self.policy_version = 0

    @property
    def last_metrics(self):  # with policy, policy_version, history: a wmrl PolicyTrainer
        return self.history[-1] if self.history else {}

    def training_step(self, batch, batch_idx):
        self.history.append({"rollout/success": 0.25 * (len(self.history) + 1)})
        obs = {"image": batch[0], "task": ["push the red block to the left"] * len(batch[0])}
        return -self.policy.log_probs(obs, batch[1], 1.0).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.policy.parameters(), lr=1e-3)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        img = torch.randint(0, 256, (4, 32, 32, 3), generator=g, dtype=torch.uint8)
        tok = torch.randint(0, 256, (4, 56), generator=g)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(img, tok), batch_size=2)


def test_sim_eval_callback_logs(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    cb = SimEvalCallback(every_n_steps=1, episodes_per_task=1,
                         tasks=["red_on_plate", "red_left"], num_envs=2, num_videos=1, env=ENV)
    logger = CSVLogger(str(tmp_path), name="csv")
    trainer = L.Trainer(max_steps=2, logger=logger, callbacks=[cb], accelerator="cpu",
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(tmp_path))
    trainer.fit(_PolicyModule())
    assert [h["step"] for h in cb.history] == [0, 1, 2]  # start, every step; end = step 2
    # the world model's success beside the simulator's: its rollouts since the previous eval
    assert "wm/success" not in cb.history[0]
    assert [h["wm/success"] for h in cb.history[1:]] == [0.25, 0.5]
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    keys = {"sim/success", "sim/success_red_on_plate", "sim/success_red_left"}
    assert keys <= set(rows[0])
    logged = [r for r in rows if r["sim/success"] != ""]
    assert [int(r["step"]) for r in logged] == [0, 1, 2]
    assert all(0.0 <= float(r["sim/success"]) <= 1.0 for r in logged)
    out = tmp_path / "sim_eval"
    assert (out / "success_vs_step.png").stat().st_size > 1000
    assert len(list(out.glob("step000000_red_on_plate_0_*.gif"))) == 1
    assert len((out / "history.jsonl").read_text().splitlines()) == 3


def test_eval_script_loads_lightning_ckpt(tmp_path):
    base = tabletop_policy(seed=0)
    base.save_pretrained(str(tmp_path / "policy"))
    trained = tabletop_policy(seed=1)  # other weights: proves the ckpt is what gets loaded
    ckpt = {"state_dict": {f"policy.{k}": v for k, v in trained.state_dict().items()},
            "policy_version": 3, "global_step": 3}
    torch.save(ckpt, tmp_path / "last.ckpt")
    policy_cfg = {"_target_": "wmrl.policies.openvla_oft.build_policy",
                  "pretrained_path": str(tmp_path / "policy"), "unnorm_key": "tabletop"}
    loaded = load_policy(policy_cfg, str(tmp_path / "last.ckpt"))
    for k, v in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    out, table = run_eval({"policy": policy_cfg, "ckpt_path": str(tmp_path / "last.ckpt"),
                           "tasks": ["red_left"], "episodes_per_task": 2, "temperature": 1.0,
                           "seed": 0, "num_envs": 2, "repeats": 1, "num_videos": 1,
                           "out_dir": str(tmp_path / "eval"), "env": ENV})
    assert out["episodes"] == 2 and set(out["per_task"]) == {"red_left"}
    lo, hi = out["success_ci95"]
    assert lo <= out["success"] <= hi
    assert table.splitlines()[1].split()[:2] == ["red_left", "2"]
    # 1 of 4 and 3 of 4: Wilson's (k + z^2/2 -+ z sqrt(k (n-k) / n + z^2/4)) / (n + z^2)
    assert format_table({"a": [True, False, False, False],
                         "b": [True, True, True, False]}).splitlines() == [
        "task             episodes  success  95% interval",
        "a                       4    0.250  [0.046, 0.699]",
        "b                       4    0.750  [0.301, 0.954]",
        "overall                 8    0.500  [0.215, 0.785]"]
    assert (tmp_path / "eval/results.json").is_file()
    assert len(list((tmp_path / "eval").glob("red_left_0_*.gif"))) == 1
    torch.save({"state_dict": {"model.w": torch.zeros(1)}}, tmp_path / "bad.ckpt")
    with pytest.raises(KeyError, match="bad.ckpt.*policy"):
        policy_state_from_ckpt(str(tmp_path / "bad.ckpt"))
