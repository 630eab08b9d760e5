"""Plan device memory for the real sizes, without a GPU and without reading any weights.

    python scripts/plan.py                                   # 7.5B policy + Wan2.2-5B, 8 devices
    python scripts/plan.py trainer.devices=4 algorithm.micro_batch=16
    python scripts/plan.py policy.gradient_checkpointing=false rollout.num_envs=64
    python scripts/plan.py env.world_model.vae_dtype=float32 +plan.prompt_tokens=128
    python scripts/plan.py experiment=wovr_libero_spatial env=wovr_libero  # a recipe, real sizes

Composes ``conf/fit.yaml`` (any override that ``scripts/fit.py`` takes works) with the
experiment ``conf/experiment/real_size.yaml`` after the chosen one (``tabletop`` by default):
``policy=openvla_oft_7b env=wan22_ti2v_5b_libero reward=resnet_real_size`` (ResNet-18 widths,
frames at their own size) ``strategy=hybrid_shard trainer.devices=8 rollout.num_envs=8`` (the
WoVR recipe's 64 envs over 8 ranks); an override of a key or of a group replaces its value
there. Builds the models on the meta device (absent checkpoints: their architecture configs),
prints a table per role and per placement and then one JSON line per figure. Formulas:
``wmrl/plan/`` (``wmrl/plan/__init__.py`` names the file of each part). ``+plan.headroom``,
``+plan.device_sizes_gb``, ``+plan.sweep_envs`` and ``+plan.prompt_tokens`` tune the report.

Then the world-model fine-tune (``scripts/finetune_world_model.py strategy=world_model_shard
trainer.precision=bf16-true``) of the same world model on the same ``trainer.devices``: full and
LoRA (``+plan.lora_rank``, default 32), ``+plan.finetune_clips`` clips per rank (default
``data.batch_size`` of conf/finetune_world_model.yaml), formulas in ``wmrl/plan/finetune.py``.
"""

import sys

import hydra
from omegaconf import DictConfig

from wmrl.config import ConfigError, validate
from wmrl.plan.compose import REAL_SIZE, options_from
from wmrl.plan.finetune import make_finetune_plan
from wmrl.plan.memory import make_plan
from wmrl.plan.report import (
    finetune_json_lines,
    format_finetune_table,
    format_table,
    json_lines,
)

# no outputs/<date>/ directory and no log files for a report
QUIET = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled",
         "hydra/hydra_logging=disabled")


@hydra.main(config_path="../conf", config_name="fit", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        validate(cfg)
        options = options_from(cfg)
        plan = make_plan(cfg, options)
        finetune = make_finetune_plan(cfg, options)
    except (ConfigError, ValueError) as err:
        print(f"plan error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_table(plan))
    print()
    print(format_finetune_table(finetune))
    print()
    for line in [*json_lines(plan), *finetune_json_lines(finetune)]:
        print(line)


if __name__ == "__main__":
    args = [REAL_SIZE, *sys.argv[1:]]
    given = {a.split("=", 1)[0] for a in args}
    sys.argv = [sys.argv[0], *args, *(q for q in QUIET if q.split("=", 1)[0] not in given)]
    main()
