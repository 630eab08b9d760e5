"""The config the full-size check composes (``make plan``'s, WoVR by default) and its
``+check.<name>`` options; what each part changes in it."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.errors import ConfigError
from wmrl.plan.compose import compose as compose_planned
from wmrl.plan.compose import options_from

DEFAULTS = ("experiment=wovr_libero_spatial", "env=wovr_libero")  # unless the user names others
PARTS = ("world_model", "rollout", "grpo_lora", "grpo_full")
ROLE = {"world_model": "env", "rollout": "rollout", "grpo_lora": "trainer",
        "grpo_full": "trainer"}  # the plan's role each part is compared with


@dataclass
class CheckOptions:
    """``+check.<name>=...`` on the command line."""
    parts: tuple[str, ...] = PARTS
    envs: int = 1                # envs one chunk step and one policy forward take
    micro_batch: int = 1         # samples per GRPO micro-batch
    workdir: str = "outputs/full_size_check"
    keep: bool = False           # keep the generated release, world model and policy
    release: str | None = None   # a directory holding RLinf's release files
    device: str | None = None    # default: the first card of this process's family, else cpu
    tolerance: float = 0.15
    timeout_s: int = 3600        # per part

    def __post_init__(self):
        bad = sorted(set(self.parts) - set(PARTS))
        if bad:
            raise ConfigError(f"+check.parts: {bad} unknown; choose from {list(PARTS)}")
        if self.envs < 1 or self.micro_batch < 1:
            raise ConfigError("+check.envs and +check.micro_batch must be >= 1")


def compose(user: list[str], part: list[str] = ()):
    """The planned config (``wmrl.plan.compose``) with ``DEFAULTS`` the user did not replace,
    the user's overrides and a part's."""
    given = {a.split("=", 1)[0].lstrip("+~") for a in user}
    defaults = [d for d in DEFAULTS if d.split("=", 1)[0] not in given]
    return compose_planned([*defaults, *user, *part])


def check_options(cfg) -> CheckOptions:
    return options_from(cfg, "check", CheckOptions)


def part_overrides(part: str, opts: CheckOptions, lora: bool) -> list[str]:
    """What a part changes in the user's config: one device, its envs or its batch."""
    one = ["trainer.devices=1", "rollout.num_env_workers=1", "rollout.num_rollout_workers=1",
           "rollout.pipeline_stages=1"]
    if part in ("world_model", "rollout"):  # the envs one group (the env part sets it: a
        # rollout group is >= 2, RolloutConfig refuses 1)
        return [*one, f"rollout.num_envs={opts.envs}",
                f"rollout.group_size={max(2, opts.envs)}"]
    b = opts.micro_batch
    update = [*one, f"rollout.num_envs={2 * b}", "rollout.group_size=2",
              f"algorithm.micro_batch={b}", f"algorithm.global_batch={2 * b}",
              "algorithm.gradient_accumulation=true", "algorithm.update_epochs=1",
              "algorithm.filter_groups=false", "algorithm.return_filter=null",
              "trainer.max_steps=1"]
    if part == "grpo_lora":
        return [*update, *([] if lora else ["policy/lora=rlinf"]), "policy.dtype=bfloat16"]
    return [*update, "policy.lora=null"]
