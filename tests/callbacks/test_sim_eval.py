"""SimEvalCallback's eval at the start of training: the base policy's at step 0, none again
when a run resumes after its evals began (a preempted run resumed at step 12 used to score
both scene sets again, 4 minutes on the CPU tabletop task)."""

from __future__ import annotations

from callbacks.sim_eval import SimEvalCallback


def test_start_eval_at_step_0_and_on_a_resume_without_history():
    cb = SimEvalCallback(every_n_steps=10)
    assert cb.start_due(0)
    assert cb.start_due(12)  # a checkpoint without eval history: score where it starts
    cb.load_state_dict({"history": [{"step": 0, "sim/success": 0.44},
                                    {"step": 10, "sim/success": 0.47}], "last_step": 10})
    assert not cb.start_due(12)  # resumed after step 10's eval: go on to step 20's
    assert cb.start_due(0)  # a resume from step 0 (its eval not written) scores it
    assert not SimEvalCallback(every_n_steps=10, at_start=False).start_due(0)


def test_paired_gap_at_an_eval(tmp_path, capsys):
    """One eval of the shipped policy (2 scenes, 16 steps) with side_by_side on both (3 asked,
    at most the eval's): the paired figures in the history row are the counts of
    side_by_side.jsonl's rows, whose simulator verdicts are the eval's own (paired sim success
    = sim/success); a GIF for the one scene the eval kept a video of."""
    import json

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from test_config import fit_cfg

    from wmrl.build import build, to_container

    cfg = fit_cfg()
    sim = {**to_container(cfg.callbacks.sim_eval.env), "max_episode_steps": 16}
    sbs = {"scenes": 3, "env": to_container(cfg.env), "chunk": 8, "max_episode_steps": 16}
    cb = SimEvalCallback(episodes_per_task=2, tasks=["red_of_two"], num_envs=2, num_videos=1,
                         env=sim, side_by_side=sbs, out_dir=str(tmp_path))
    module = L.LightningModule()
    module.policy = build(cfg.policy)
    trainer = L.Trainer(logger=CSVLogger(str(tmp_path)), default_root_dir=str(tmp_path),
                        enable_progress_bar=False)
    cb._run(trainer, module)
    row = cb.history[0]
    rows = [json.loads(line) for line in open(tmp_path / "side_by_side" / "side_by_side.jsonl")]
    assert [(r["step"], r["scene"]) for r in rows] == [(0, 0), (0, 1)]
    wm, real = ([int(r[k]) for r in rows] for k in ("imagined_success", "sim_success"))
    assert row["sim/paired_scenes"] == 2
    assert row["sim/paired_wm_success"] == sum(wm) / 2
    assert row["sim/paired_sim_success"] == sum(real) / 2 == row["sim/success"]
    assert row["sim/paired_gap"] == (sum(wm) - sum(real)) / 2
    assert row["sim/paired_agreement"] == sum(a == b for a, b in zip(wm, real)) / 2
    rep = [int(r["replayed_sim_success"]) for r in rows]  # the imagined actions, replayed
    assert row["sim/paired_replay_success"] == sum(rep) / 2
    assert row["sim/paired_replay_agreement"] == sum(a == b for a, b in zip(wm, rep)) / 2
    assert len(list((tmp_path / "side_by_side").glob("step000000_scene0_wm_*_sim_*.gif"))) == 1
    assert len(list((tmp_path / "side_by_side").glob("*.gif"))) == 1
    assert "imagined vs real on 2 scenes" in capsys.readouterr().out
    saved = json.loads((tmp_path / "history.jsonl").read_text())
    assert saved["sim/paired_gap"] == row["sim/paired_gap"]


def test_paired_gap_of_a_pace_run_imagines_with_its_current_world_model(tmp_path):
    """A module with PACE (``pl_module.pace``): before any round (version 0) the env's weights;
    after one, the copy PACE refined (``Pace.current_state``). Here the refined copy is made to
    differ from the shipped weights (one tensor shifted), so the imagined episodes differ while
    the simulator's verdicts do not."""
    import json

    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger
    from test_config import fit_cfg

    from wmrl.build import build, to_container
    from wmrl.pace.round import Pace

    cfg = fit_cfg()
    sim = {**to_container(cfg.callbacks.sim_eval.env), "max_episode_steps": 16}
    sbs = {"scenes": 2, "env": to_container(cfg.env), "chunk": 8, "max_episode_steps": 16}
    module = L.LightningModule()
    module.policy = build(cfg.policy)
    module.pace = Pace(world_model=to_container(cfg.env.world_model), tasks=["red_of_two"],
                       verbose=False)
    rows = {}
    for version in (0, 1):
        if version:
            module.pace.ensure_models()
            with torch.no_grad():
                next(module.pace.model.transformer.parameters()).add_(0.5)
            module.pace.ledger.version = 1
        out = tmp_path / f"v{version}"
        cb = SimEvalCallback(episodes_per_task=2, tasks=["red_of_two"], num_envs=2,
                             num_videos=0, env=sim, side_by_side=sbs, out_dir=str(out))
        trainer = L.Trainer(logger=CSVLogger(str(out)), default_root_dir=str(out),
                            enable_progress_bar=False)
        cb._run(trainer, module)
        rows[version] = [json.loads(line) for line in
                         open(out / "side_by_side" / "side_by_side.jsonl")]
    assert [r["sim_success"] for r in rows[0]] == [r["sim_success"] for r in rows[1]]
    assert [r["peak_score"] for r in rows[0]] != [r["peak_score"] for r in rows[1]]
