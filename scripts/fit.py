"""The main job: GRPO post-training inside the world model.

    python scripts/fit.py                                  # short CPU run, tiny models
    python scripts/fit.py trainer.max_steps=2 rollout.num_envs=8 logger=csv
    python scripts/fit.py ckpt_path=outputs/.../checkpoints/last.ckpt   # resume
    python scripts/fit.py ckpt_path=last hydra.run.dir=outputs/...     # the same, same run dir
"""

import hydra
from omegaconf import DictConfig

from wmrl.config import check_paths, resolve_ckpt_path, validate
from wmrl.errors import exit_on_config_error


def checked_fit(cfg: DictConfig) -> None:
    # the checks before Lightning and the trainer load (~10 s): a bad setting or a damaged
    # asset is one line and exit 2 within seconds (fit checks again, at no cost)
    validate(resolve_ckpt_path(cfg))
    check_paths(cfg)
    from wmrl.fit import fit

    fit(cfg)


@hydra.main(config_path="../conf", config_name="fit", version_base="1.3")
def main(cfg: DictConfig) -> None:
    exit_on_config_error(checked_fit, cfg)


if __name__ == "__main__":
    main()
