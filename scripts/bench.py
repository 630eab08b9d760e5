"""Benchmarks: one JSON line per measured figure.

    python scripts/bench.py                 # every module in wmrl/bench
    python scripts/bench.py policy reward   # only these

stdout carries the JSON lines only (``scripts/bench.py | jq`` works): what a bench prints while
it runs, e.g. the step lines of the fits the placement bench makes, goes to stderr.
"""

import contextlib
import importlib
import json
import os
import pkgutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import wmrl.bench  # noqa: E402


@contextlib.contextmanager
def stdout_to_stderr():
    """Point file descriptor 1 at stderr for the block: the fits' step lines, Ray's forwarded
    worker logs and child processes all write to the descriptor, not only to ``sys.stdout``."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a sys.stdout not on fd 1 (a capture)
            yield
    finally:
        sys.stdout.flush()  # what the block printed goes out before fd 1 is stdout again
        os.dup2(saved, 1)
        os.close(saved)


def main(names: list[str]) -> int:
    available = sorted(m.name for m in pkgutil.iter_modules(wmrl.bench.__path__))
    unknown = sorted(set(names) - set(available))
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {available}", file=sys.stderr)
        return 2
    failed = 0
    for name in names or available:
        t0 = time.perf_counter()
        try:
            with stdout_to_stderr():
                figures = importlib.import_module(f"wmrl.bench.{name}").run()
        except Exception as err:  # report and go on: one broken bench must not hide the rest
            print(json.dumps({"name": f"{name}.error", "error": repr(err)}), flush=True)
            failed += 1
            continue
        for fig in figures:
            print(json.dumps(fig), flush=True)
        print(json.dumps({"name": f"{name}.bench_wall_s",
                          "value": round(time.perf_counter() - t0, 2), "unit": "s"}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
