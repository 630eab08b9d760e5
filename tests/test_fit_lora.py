"""The tabletop fit with LoRA on its policy (``policy/lora=rlinf``), as users run it, float32
master weights computing in bf16 (``trainer.precision=bf16-mixed``): real Ray actors get the
adapters alone, the KL reference is the base, the checkpoint holds the adapters and resumes,
and the result leaves as a merged policy in the shipped layout or as a peft adapter directory.
(bf16 actor copies of float32 weights, ``rollout.policy_dtype``: tests/rollout/test_weight_sync.py.)"""

import pytest
import torch
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir

from wmrl.fit import fit
from wmrl.pipeline.export import export_policy
from wmrl.policies.openvla_oft import OpenVLAOFTPolicy, build_policy
from wmrl.weights.lora import is_adapter_key, merged_state_dict

pytestmark = pytest.mark.slow

TINY = ["logger=csv", "rollout.num_envs=8",
        "rollout.group_size=4", "task.max_episode_steps=16", "algorithm.global_batch=64",
        "algorithm.filter_groups=false", "algorithm.lr=1e-3", "callbacks.sim_eval=null"]


def run(tmp_path, steps, *extra):
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return fit(compose("fit", overrides=[f"run_dir={tmp_path}", *TINY,
                                             f"trainer.max_steps={steps}", *extra]))


LORA = ["policy/lora=rlinf", "policy.lora.rank=4", "trainer.precision=bf16-mixed"]


def test_lora_fit_resumes_and_exports(tmp_path, ray_local):
    trainer, module = run(tmp_path / "run", 1, *LORA)
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    keys = set(ckpt["state_dict"])
    assert keys and all(is_adapter_key(k) for k in keys)  # no base, no reference copy
    assert module.reference_policy is None and module.algorithm.kl_coef > 0
    base = build_policy(pretrained_path=str(module.hparams.policy["pretrained_path"]),
                        unnorm_key="tabletop").state_dict()
    trained = module.policy.state_dict()
    frozen = {k.replace(".base_layer.", "."): v for k, v in trained.items()
              if not is_adapter_key(k)}
    assert all(torch.equal(v, base[k]) for k, v in frozen.items())  # the base never moved
    moved = [k for k in trained if "lora_B" in k and trained[k].abs().max() > 0]
    assert moved  # B starts at zero (gaussian init): the step trained the adapters
    trainer, module = run(tmp_path / "run", 2, *LORA, "ckpt_path=last")
    assert trainer.global_step == 2 and module.policy_version == 2
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trained_now = module.policy.state_dict()
    export_policy(str(last), str(tmp_path / "merged"))
    back = OpenVLAOFTPolicy.from_pretrained(str(tmp_path / "merged"), unnorm_key="tabletop")
    want = merged_state_dict(module.policy)
    assert all(torch.equal(v, want[k]) for k, v in back.state_dict().items())
    # scripts/eval.py's loader: the same policy config (its lora included) and the checkpoint
    from wmrl.eval.policy_checkpoint import load_policy

    evaluated = load_policy(module.hparams.policy, str(last)).state_dict()
    assert all(torch.equal(v, trained_now[k]) for k, v in evaluated.items())
    out = export_policy(str(last), str(tmp_path / "adapter"), adapter=True)
    assert out["rank"] == 4 and out["bytes"] < 0.1 * sum(
        v.numel() * v.element_size() for v in want.values())
