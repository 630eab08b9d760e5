"""Benchmarks: one JSON line per measured figure.

    python scripts/bench.py                 # every module in wmrl/bench
    python scripts/bench.py policy reward   # only these
"""

import importlib
import json
import os
import pkgutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import wmrl.bench  # noqa: E402


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
