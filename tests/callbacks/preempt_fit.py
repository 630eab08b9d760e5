"""Run by test_checkpoints.py as a script: the toy fit of tests/test_fit_toy.py, logging to an
appending metrics.csv, whose 2nd step announces itself (``<run_dir>/step2_started``) and
lasts a few seconds, so the test can send SIGTERM during it.

    python preempt_fit.py RUN_DIR MAX_STEPS EVERY_N_STEPS
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path[:0] = [TESTS, os.path.dirname(TESTS)]
os.environ["PYTHONPATH"] = os.pathsep.join([TESTS, os.path.dirname(TESTS),
                                            os.environ.get("PYTHONPATH", "")])

import lightning as L  # noqa: E402
from test_fit_toy import toy_cfg  # noqa: E402

from wmrl.fit import fit  # noqa: E402

STARTED = "step2_started"


class SlowSecondStep(L.Callback):
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == 1:
            open(os.path.join(self.run_dir, STARTED), "w").close()
            time.sleep(4)  # the SIGTERM arrives here, inside the step


def main(run_dir: str, max_steps: int, every_n_steps: int) -> None:
    import faulthandler

    faulthandler.dump_traceback_later(150, exit=True)  # a hang prints every stack, then exits
    cfg = toy_cfg(run_dir, **{
        "trainer.max_steps": max_steps, "checkpoint.every_n_steps": every_n_steps,
        "checkpoint.keep_last": 2, "rollout.ray_address": os.environ["WMRL_TEST_RAY_ADDRESS"],
        "logger": {"_target_": "callbacks.resumable_loggers.AppendingCSVLogger", "version": 0}})
    fit(cfg, extra_callbacks=[SlowSecondStep(run_dir)])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
