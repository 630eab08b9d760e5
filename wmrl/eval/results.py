"""An eval's results (``scripts/eval.py``): the policy of ``conf/eval.yaml`` scored in the
simulator (``evaluate.py``), its figures as one dict (success with its 95% Wilson interval, per
task, and with ``repeats`` the fraction of mixed groups), a per-task table, and with
``out_dir`` the episodes' GIFs and ``results.json``."""

from __future__ import annotations

import json
import os

from wmrl.eval.evaluate import evaluate_eval_config, mixed_group_fraction
from wmrl.io.atomic import write_text
from wmrl.io.videos import save_gif
from wmrl.measure.stats import wilson


def run_eval(cfg: dict) -> tuple[dict, str]:
    """(the figures, the per-task table) of the resolved eval config ``cfg``; a config error is
    a ``ConfigError``."""
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
    if cfg.get("out_dir"):
        os.makedirs(cfg["out_dir"], exist_ok=True)
        for i, (task, frames, ok) in enumerate(res.videos):
            name = task.replace("/", "-")  # LIBERO's "<suite>/<id>"
            save_gif(frames, os.path.join(cfg["out_dir"], f"{name}_{i}_{'ok' if ok else 'fail'}"
                                                          ".gif"))
        write_text(os.path.join(cfg["out_dir"], "results.json"), json.dumps(out, indent=2))
    return out, format_table(res.outcomes)


def format_table(outcomes: dict[str, list[bool]]) -> str:
    """Per task and overall: episodes, success and its 95% Wilson interval (``wmrl.measure.stats``)."""
    rows = [f"{'task':<16}{'episodes':>9}{'success':>9}  95% interval"]
    for name, ok in [*outcomes.items(), ("overall", [o for v in outcomes.values() for o in v])]:
        lo, hi = wilson(sum(ok), len(ok))
        rows.append(f"{name:<16}{len(ok):>9d}{sum(ok) / max(len(ok), 1):>9.3f}  "
                    f"[{lo:.3f}, {hi:.3f}]")
    return "\n".join(rows)
