"""strategies/README.md stays runnable: its ```python blocks run, in order, as one script in a
fresh interpreter (outside the repository, so only the importable package is used)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "strategies" / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_strategies_readme_example_runs(tmp_path):
    blocks = python_blocks(README.read_text())
    assert blocks, "strategies/README.md has no ```python block"
    script = tmp_path / "readme_example.py"
    script.write_text("\n\n".join(blocks))
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                        "NODE_RANK", "LOCAL_WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "loaded 8 full tensors" in out.stdout, out.stdout[-2000:]
