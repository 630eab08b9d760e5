"""Lightning callbacks and plug-ins used by the wmrl trainer (the one trainer set-up,
``wmrl/launch/trainer.py``, and ``wmrl/fit.py`` wire them in). Nothing is imported here; the
parts:

``preemption.py``         ``StepCheckpoint``: step checkpoints, the newest ``keep_last`` plus
                          ``last.ckpt``; on SIGTERM ``last.ckpt`` and the command that resumes.
``checkpoint_io.py``      ``AtomicCheckpointIO``: checkpoint writes a crash cannot corrupt.
``progress.py``           ``StepProgressBar``: the bar counts RL steps (``step 12/30``).
``step_summary.py``       one readable line per training step.
``resumable_loggers.py``  logger runs that a resume into the same run dir continues.
``run_record.py``         the resolved config with every checkpoint and in every logger's run.
``sim_eval.py``           ``SimEvalCallback``: evaluation in the simulator during a fit.
``tracing.py``            every process's trace spans collected per step, one Chrome trace
                          per run.
"""
