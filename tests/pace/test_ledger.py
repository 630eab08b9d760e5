"""PaceLedger (wmrl/pace/ledger.py): the simulator budget, counted by hand."""

import json
import math

from wmrl.pace.ledger import PaceLedger, round_metrics


def row(episodes, steps, successes):
    return {"episodes": episodes, "steps": steps, "successes": successes,
            "finetune_loss": 0.5, "finetune_loss_first": 1.0, "wm_loss_before": 0.2,
            "wm_loss_after": math.nan}


def test_rounds_add_up_and_survive_a_checkpoint(tmp_path):
    ledger = PaceLedger(str(tmp_path), verbose=False)
    first = ledger.record(row(4, 100, 1), step=5, version=1, push_seconds=0.5, seconds=2.0)
    ledger.record(row(4, 60, 3), step=10, version=2, push_seconds=0.5, seconds=3.0)
    assert (first["round"], first["real_episodes_total"], first["real_steps_total"]) == (0, 4, 100)
    assert ledger.counts() == {"pace/real_episodes": 8.0, "pace/real_steps": 160.0,
                               "pace/world_model_version": 2.0, "pace/rounds": 2.0}
    summary = ledger.finish(scenes="random")
    assert summary["real_success"] == 4 / 8 and summary["seconds"] == 5.0
    assert json.loads((tmp_path / "summary.json").read_text())["scenes"] == "random"
    ledger.write_row(first)
    assert json.loads((tmp_path / "history.jsonl").read_text())["wm_loss_after"] is None
    again = PaceLedger()
    again.load_state_dict(ledger.state_dict())
    assert again.state_dict() == ledger.state_dict() and again.last_round_step == 10
    m = round_metrics(first)
    assert m["pace/round_real_success"] == 0.25 and m["pace/push_seconds"] == 0.5
