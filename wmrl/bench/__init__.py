"""Benchmarks, one module per capability. Each module has ``run() -> list[dict]``; every dict
is one figure, e.g. {"name": "policy.sample_chunks_per_s", "value": 123.4, "unit": "chunks/s",
...extra context}. ``scripts/bench.py`` prints one JSON line per figure."""
