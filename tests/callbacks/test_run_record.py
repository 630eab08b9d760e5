"""The run fully recorded, in a tiny real Lightning fit (a plain module, no Ray) with a
CSVLogger and an offline WandbLogger: the resolved config in ``hparams.yaml`` and in the wandb
run's config (``RunRecordCallback``), the merged Chrome trace in the wandb run's files
(``TracingCallback``), and the sim eval's history + plot as a wandb artifact
(``SimEvalCallback``).

The run's config is read from the run object, the trace from the offline run's ``files/``, and
the artifact from the run's real ``log_artifact`` call (recorded on its way through).
"""

from __future__ import annotations

import glob
import json
import os

import lightning as L
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from callbacks.run_record import RunRecordCallback
from callbacks.tracing import TracingCallback
from wmrl.build import to_container
from wmrl.measure.tracing import Tracer

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "conf")


class TinyModule(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        with Tracer.trace_span("tiny_step", step=self.global_step):
            loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """(run dir, resolved config, the WandbLogger's run config, the artifacts it logged)."""
    from callbacks.sim_eval import SimEvalCallback

    mp = pytest.MonkeyPatch()
    run_dir = tmp_path_factory.mktemp("recorded_run")
    for k, v in dict(WANDB_MODE="offline", WANDB_SILENT="true",
                     WANDB_DIR=str(run_dir), WANDB_DATA_DIR=str(run_dir / "wandb-data"),
                     WANDB_CACHE_DIR=str(run_dir / "wandb-cache"),
                     WANDB_CONFIG_DIR=str(run_dir / "wandb-config")).items():
        mp.setenv(k, v)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        config = to_container(compose("fit", overrides=[f"run_dir={run_dir}", "seed=7",
                                                        "algorithm.lr=3.5e-05"]))
    sim_dir = run_dir / "sim_eval"  # as a sim eval leaves it (no simulator run here)
    sim_dir.mkdir()
    (sim_dir / "history.jsonl").write_text(json.dumps({"step": 0, "sim/success": 0.5}) + "\n")
    (sim_dir / "success_vs_step.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    wandb_logger = WandbLogger(project="wmrl-test", offline=True, save_dir=str(run_dir))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)),
                                       batch_size=4)
    trainer = L.Trainer(
        max_steps=2, accelerator="cpu", devices=1, default_root_dir=str(run_dir),
        logger=[CSVLogger(str(run_dir), name="csv", version=0), wandb_logger],
        callbacks=[RunRecordCallback(config, str(run_dir)),
                   TracingCallback(str(run_dir / "trace")),
                   SimEvalCallback(every_n_steps=0, at_start=False, at_end=False)],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        log_every_n_steps=1)
    run, logged = wandb_logger.experiment, []
    real_log_artifact = run.log_artifact

    def log_artifact(artifact, *args, **kwargs):
        logged.append(artifact)
        return real_log_artifact(artifact, *args, **kwargs)

    run.log_artifact = log_artifact
    try:
        trainer.fit(TinyModule(), data)
        run_config = json.loads(json.dumps(dict(run.config)))
        run.finish()  # flushes the offline run's .wandb log
    finally:
        Tracer.configure(enabled=False)
        Tracer.flush()
        mp.undo()
    return run_dir, config, run_config, logged


def test_csv_logger_hparams_yaml_holds_the_resolved_config(recorded_run):
    run_dir, config, _, _ = recorded_run
    hparams = yaml.safe_load((run_dir / "csv" / "version_0" / "hparams.yaml").read_text())
    assert hparams == config
    assert hparams["seed"] == 7 and hparams["algorithm"]["lr"] == 3.5e-05
    assert hparams["rollout"]["group_size"] == config["rollout"]["group_size"]
    assert (run_dir / "csv" / "version_0" / "metrics.csv").exists()


def test_wandb_run_config_holds_the_resolved_config(recorded_run):
    _, config, run_config, _ = recorded_run
    assert {k: run_config[k] for k in config} == config  # nested, as in the yaml
    assert run_config["algorithm"]["lr"] == 3.5e-05 and run_config["seed"] == 7


def test_trace_is_saved_to_the_wandb_run(recorded_run):
    run_dir, _, _, _ = recorded_run
    trace = run_dir / "trace" / "trace.json"
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in spans] == ["tiny_step", "tiny_step"]
    (files_dir,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "files"))
    assert json.loads(open(os.path.join(files_dir, "trace.json")).read()) == \
        json.loads(trace.read_text())


def test_sim_eval_history_and_plot_are_a_wandb_artifact(recorded_run):
    _, _, _, arts = recorded_run
    assert [(a.type, a.name.split("-")[0]) for a in arts] == [("sim_eval", "sim_eval")]
    assert sorted(arts[0].manifest.entries) == ["history.jsonl", "success_vs_step.png"]
