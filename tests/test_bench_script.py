"""scripts/bench.py (``wmrl.bench.run_benches``): stdout carries one JSON line per figure and
nothing else, whatever a bench prints while it runs (the placement bench's fits print step
lines; a child process writes to the inherited descriptor)."""

import json
import os
import sys

import wmrl.bench

NOISY = '''
import os, subprocess, sys

def run():
    print("step 1 | return 0.5")                       # sys.stdout
    os.write(1, b"raw descriptor line\\n")              # fd 1
    subprocess.run([sys.executable, "-c", "print('child line')"], check=True)
    return [{"name": "noisy.value", "value": 2.5, "unit": "s"}]
'''


def test_only_json_lines_reach_stdout(tmp_path, monkeypatch, capfd):
    (tmp_path / "noisy.py").write_text(NOISY)
    monkeypatch.setattr(wmrl.bench, "__path__", [*wmrl.bench.__path__, str(tmp_path)])
    try:
        assert wmrl.bench.run_benches(["noisy"]) == 0
    finally:
        sys.modules.pop("wmrl.bench.noisy", None)
    out, err = capfd.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]  # every line is JSON
    assert [f["name"] for f in lines] == ["noisy.value", "noisy.bench_wall_s"]
    assert lines[0]["value"] == 2.5
    for noise in ("step 1 | return 0.5", "raw descriptor line", "child line"):
        assert noise in err and noise not in out
    os.write(1, b"after\n")  # fd 1 is stdout again once the bench has run
    assert capfd.readouterr() == ("after\n", "")
