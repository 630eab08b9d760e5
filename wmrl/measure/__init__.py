"""Measuring runs: where the time goes, peak memory, and the statistics that compare runs and
seeds. Nothing is imported here (a rollout actor imports ``tracing.py`` alone); the parts:

``tracing.py``      spans per process merged into one Chrome trace per run (``tracing.enabled``).
``peak_memory.py``  a phase's peak memory in this process, counted as ``make plan`` counts it.
``stats.py``        the statistics, all from scipy: Wilson intervals, mean and SE, t-intervals,
                    Welch's test, Pearson's r.
``run_logs.py``     a run's logged metrics read back, and two runs compared
                    (``scripts/compare_runs.py``).
"""
