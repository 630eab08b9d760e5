"""Run by test_grpo_sharded.py as a script, once per rank (LOCAL_RANK, WORLD_SIZE, MASTER_PORT
in the environment, as a cluster launcher sets them): ``sharded_fit.py OUT_DIR [CKPT_PATH]``."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE),
                                            os.environ.get("PYTHONPATH", "")])

from omegaconf import OmegaConf  # noqa: E402
from test_fit_toy import toy_cfg  # noqa: E402

from wmrl.fit import fit  # noqa: E402


def main(out_dir: str, ckpt_path: str | None = None) -> None:
    import faulthandler

    # a hang prints every stack, then exits (before the test's 400 s; a loaded 2-core machine
    # can take minutes for the imports and actors alone)
    faulthandler.dump_traceback_later(300, exit=True)
    cfg = toy_cfg(out_dir, **{"trainer.max_steps": 3, "trainer.devices": 2,
                              # 16 samples a rank (no group dropped) in mini-batches of 8:
                              # the second optimizer step of a batch goes through the FSDP
                              # strategy uncounted, so global_step still counts batches (3)
                              "rollout.num_envs": 8, "algorithm.global_batch": 8,
                              "algorithm.filter_groups": False,
                              "algorithm.kl_coef": 0.05,  # the reference is sharded too
                              "checkpoint.keep_last": -1, "ckpt_path": ckpt_path})
    cfg.strategy = OmegaConf.create({
        "_target_": "strategies.HybridShardStrategy", "shard_size": "world",
        "param_dtype": None, "reduce_dtype": None, "sync_module_states": True,
    })
    # one collocated actor (env + policy) a rank: each actor start imports torch and wmrl, and
    # on 2 cores the actors, not the steps, are the test's time; the weights still go from the
    # sharded policy to each rank's own actor (the placements: tests/rollout, test_fit_toy)
    cfg.rollout.placement = "collocated"
    cfg.rollout.num_env_workers = 1
    cfg.rollout.worker_cpus = 0.25
    cfg.rollout.ray_address = os.environ.get("WMRL_TEST_RAY_ADDRESS")
    trainer, module = fit(cfg)
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v)
             for k, v in module.policy.state_dict().items()}
    ref = module.reference_policy
    ref_bias = ref.bias.full_tensor() if hasattr(ref.bias, "full_tensor") else ref.bias
    summary = {"rank": trainer.global_rank, "world": trainer.world_size,
               "steps": trainer.global_step, "version": module.policy_version,
               "optimizer_steps": [m["train/optimizer_steps"] for m in module.history],
               "success": [m["rollout/success"] for m in module.history],
               "bias_sum": float(state["bias"].sum()),
               "sharded": type(module.policy).__name__,
               "ref_sharded": type(ref).__name__, "ref_bias_abs": float(ref_bias.abs().sum()),
               "ref_kl": module.last_metrics["train/ref_kl"]}
    with open(os.path.join(out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
