"""Benchmarks: one JSON line per measured figure.

    python scripts/bench.py                 # every module in wmrl/bench
    python scripts/bench.py policy reward   # only these

stdout carries the JSON lines only (``scripts/bench.py | jq`` works): what a bench prints while
it runs, e.g. the step lines of the fits the placement bench makes, goes to stderr. The
benches and their runner are ``wmrl/bench/``.
"""

import sys

from wmrl.bench import run_benches

if __name__ == "__main__":
    sys.exit(run_benches(sys.argv[1:]))
