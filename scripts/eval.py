"""Evaluate a policy in the tabletop simulator or LIBERO (success_once on fixed initial states).

    python scripts/eval.py                                           # shipped SFT policy
    python scripts/eval.py ckpt_path=outputs/.../checkpoints/last.ckpt  # after GRPO
    python scripts/eval.py policy.pretrained_path=DIR temperature=1.6 num_videos=2 out_dir=OUT
    python scripts/eval.py sim=libero tasks=[libero_spatial/0,libero_goal/3] policy=...  # LIBERO

``sim=libero`` (conf/sim/libero.yaml, ``make libero``) swaps the tabletop (``env``) for LIBERO's
50 fixed initial states per task; ``tasks`` then names LIBERO tasks (a suite alone: all of it).

The policy is built from the ``policy`` config group; ``ckpt_path`` then loads a Lightning
checkpoint written by ``scripts/fit.py`` (GRPOModule state dict, keys ``policy.<...>``) into
it with ``torch.load(weights_only=True)``. A checkpoint trained with another policy config
(its ``wmrl_config["policy"]``) is refused: pass the fit's ``policy=...`` and ``policy.*``
overrides. Prints a per-task table and one JSON line; a config error is one line on stderr
and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import wmrl.build  # noqa: E402,F401  (registers the ${wmrl_assets:} resolver)
from wmrl.config import ConfigError  # noqa: E402
from wmrl.eval.evaluate import evaluate_eval_config, mixed_group_fraction  # noqa: E402
from wmrl.stats import wilson  # noqa: E402
from wmrl.videos import save_gif  # noqa: E402


def run(cfg: dict) -> dict:
    repeats = int(cfg.get("repeats") or 1)
    res = evaluate_eval_config(cfg, cfg.get("ckpt_path"))
    out = {"success": res.overall, "success_ci95": list(res.interval()),
           "per_task": res.success, "episodes": res.episodes,
           "temperature": float(cfg["temperature"]), "seconds": round(res.seconds, 1),
           "ckpt_path": cfg.get("ckpt_path"),
           "pretrained_path": cfg["policy"].get("pretrained_path")}
    if repeats > 1:
        flat = [o for v in res.outcomes.values() for o in v]
        out["mixed_fraction"] = mixed_group_fraction(flat, repeats)
    print(format_table(res.outcomes))
    if cfg.get("out_dir"):
        os.makedirs(cfg["out_dir"], exist_ok=True)
        for i, (task, frames, ok) in enumerate(res.videos):
            name = task.replace("/", "-")  # LIBERO's "<suite>/<id>"
            save_gif(frames, os.path.join(cfg["out_dir"], f"{name}_{i}_{'ok' if ok else 'fail'}"
                                                          ".gif"))
        with open(os.path.join(cfg["out_dir"], "results.json"), "w") as f:
            json.dump(out, f, indent=2)
    return out


def format_table(outcomes: dict[str, list[bool]]) -> str:
    """Per task and overall: episodes, success and its 95% Wilson interval (``wmrl.stats``)."""
    rows = [f"{'task':<16}{'episodes':>9}{'success':>9}  95% interval"]
    for name, ok in [*outcomes.items(), ("overall", [o for v in outcomes.values() for o in v])]:
        lo, hi = wilson(sum(ok), len(ok))
        rows.append(f"{name:<16}{len(ok):>9d}{sum(ok) / max(len(ok), 1):>9.3f}  "
                    f"[{lo:.3f}, {hi:.3f}]")
    return "\n".join(rows)


def _hydra_main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
    def main(cfg) -> None:
        try:
            out = run(OmegaConf.to_container(cfg, resolve=True))
        except ConfigError as err:
            print(f"config error: {err}", file=sys.stderr)
            sys.exit(2)
        print(json.dumps(out))

    main()


if __name__ == "__main__":
    _hydra_main()
