"""What ``scripts/plan.py`` plans: the composed fit config with the real-size defaults, and the
report's options (``+plan.<name>=...``)."""

from __future__ import annotations

import os

from wmrl.config import to_container
from wmrl.plan.memory import PlanOptions

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "conf")

# What `python scripts/plan.py` plans with no arguments: the real-size configs, the ResNet-18
# reward at the frame size, FSDP over 8 devices, and the WoVR recipe's 64 envs spread over
# the 8 trainer ranks (8 per rank). A user override of a key (or of its group) replaces its
# default here.
REAL_SIZE_DEFAULTS = (
    "policy=openvla_oft_7b",
    "env=wan22_ti2v_5b_libero",
    "reward=resnet",
    "reward.config.widths=[64,128,256,512]",
    "reward.config.image_size=null",
    "strategy=hybrid_shard",
    "trainer.devices=8",
    "rollout.num_envs=8",
)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_real_size_defaults(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``REAL_SIZE_DEFAULTS`` the user did not override, then the user's overrides."""
    user = [_key(o) for o in overrides]
    keep = [d for d in REAL_SIZE_DEFAULTS
            if not any(_key(d) == u or _key(d).startswith(u + ".") for u in user)]
    return [*keep, *overrides]


def compose(overrides: list[str] | tuple[str, ...] = ()):
    """The planned config, composed in-process (tests); ``scripts/plan.py`` goes through
    ``hydra.main`` with the same defaults."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return hydra_compose("fit", overrides=with_real_size_defaults(list(overrides)))


def options_from(cfg) -> PlanOptions:
    """``PlanOptions`` from the optional ``plan`` key (``+plan.prompt_tokens=128``)."""
    extra = to_container(cfg.get("plan") or {})
    return PlanOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()})
