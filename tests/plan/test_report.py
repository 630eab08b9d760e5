"""``wmrl/plan/report.py`` and ``scripts/plan.py``: the table and the JSON lines."""

import json
import os
import sys

from real_size_plans import default_finetune_plan, default_plan

from wmrl.plan.report import format_table, json_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_table_and_json_lines():
    default = default_plan()
    table = format_table(default)
    for text in ("7,541,237,184", "4,999,787,712", "collocated, idle roles offloaded",
                 "141 GB", "trainer policy", "env actor"):
        assert text in table
    lines = [json.loads(x) for x in json_lines(default)]
    figures = {x["figure"] for x in lines}
    assert {"params", "bytes", "role_peak", "trainer_activations", "env_actor_peak",
            "placement", "setup"} <= figures
    assert all(isinstance(x["bytes"], int) for x in lines if x["figure"] == "bytes")
    assert len([x for x in lines if x["figure"] == "placement"]) == 4


def test_script_prints_the_table_and_json_lines(monkeypatch, capsys):
    """``python scripts/plan.py +plan.sweep_envs=[8]`` through the script's own ``__main__``
    (the real-size defaults, Hydra's main with its quiet overrides) in this process, from the
    repository root as ``make plan`` runs it; after ``default_plan()`` and
    ``default_finetune_plan()``, so the traces it shares with them are already made."""
    import runpy

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    default_plan()
    default_finetune_plan()
    script = os.path.join(ROOT, "scripts", "plan.py")
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [script, "+plan.sweep_envs=[8]"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repo root first
    try:
        runpy.run_path(script, run_name="__main__")  # an error: SystemExit(1 or 2)
    finally:  # Hydra's globals, as a fresh process would leave the next test
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    out = capsys.readouterr().out
    assert "placements: peak per device" in out
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    setup = next(x for x in lines if x["figure"] == "setup")
    assert setup["devices"] == 8
    assert "world-model fine-tune" in out  # then the fine-tune's section and figures
    assert lines[-1]["figure"] == "finetune_setup" and lines[-1]["shard_group"] == 8
    assert [x["envs_per_actor"] for x in lines if x["figure"] == "env_actor_peak"] == [8]
    assert not os.path.exists(os.path.join(ROOT, ".hydra"))
