"""Export a fit's result out of wmrl.

    python scripts/export.py RUN/checkpoints/last.ckpt --out DIR                 # the policy
    python scripts/export.py RUN/checkpoints/last.ckpt --out DIR --world-model   # PACE's world model
    python scripts/export.py RUN/checkpoints/last.ckpt --out DIR --adapter       # a LoRA fit's adapter

The policy goes out in exactly the layout the fit started from (``policy.pretrained_path``:
same shard files, tensor names, shapes, dtypes, index, config.json, dataset statistics,
tokenizer files), with a model card (README.md: base checkpoint, recipe, the run's config,
its simulator evaluations with 95% intervals); a LoRA fit's adapters are folded in, or with
``--adapter`` written alone as a peft adapter directory (``PeftModel.from_pretrained`` and
``policy.lora.path`` load it). ``--world-model`` writes instead the world
model PACE refined during the fit, as a loadable world-model directory. ``--source DIR``:
the layout / world model to start from when the run's own path is not on this machine.
The logic is wmrl/pipeline/export.py; docs/running.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from wmrl.errors import ConfigError, one_line
from wmrl.pipeline.export import export_policy, export_world_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt", help="a checkpoint that scripts/fit.py wrote (.ckpt)")
    ap.add_argument("--out", required=True,
                    help="a new or empty directory, or an earlier export of the same kind")
    ap.add_argument("--force", action="store_true",
                    help="replace --out even if it holds other files (they are deleted)")
    ap.add_argument("--world-model", action="store_true",
                    help="export the PACE-refined world model instead of the policy")
    ap.add_argument("--adapter", action="store_true",
                    help="a LoRA fit: write the adapter alone (peft layout), not merged")
    ap.add_argument("--source", default=None, help="the directory the run started from, when "
                    "the path in the checkpoint's config is not on this machine")
    args = ap.parse_args(argv)
    try:
        if args.world_model:
            summary = export_world_model(args.ckpt, args.out, args.source, args.force)
        else:
            summary = export_policy(args.ckpt, args.out, args.source, adapter=args.adapter,
                                    force=args.force)
        print(json.dumps(summary))
    except ConfigError as err:
        if os.environ.get("WMRL_FULL_ERROR") == "1":
            raise
        print(f"export: {one_line(err)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
