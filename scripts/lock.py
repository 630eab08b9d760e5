"""The lock of the tested environment: write it from pip's resolution, compare a venv with it.

    python scripts/lock.py write REPORT.json --out requirements/lock.txt
        REPORT.json is ``pip install --dry-run --ignore-installed --report`` of
        ``torch==X -e .[dev]``: every package pip chose, its version and the sha256 of the
        very file it chose. Written as a requirements file (``name==version --hash=sha256:...``)
        that ``pip install --require-hashes --no-deps -r`` installs exactly. torch and wmrl itself
        are left out (the Makefile pins torch first: the CPU wheel on a CPU machine).
    python scripts/lock.py diff requirements/lock.txt
        The packages of this interpreter whose version differs from the lock (what ``make
        test-latest`` tests beyond the lock), one line each; exit 0.

Why pip's own report and not pip-tools / uv: the lock must be what ``pip install`` gives on
the machine CI runs on, CPU torch wheel included, and needs no tool but pip. It is therefore a
lock for one platform (the header says which); elsewhere pyproject.toml's ranges install.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import platform
import re
import sys
from pathlib import Path

LEFT_OUT = {"torch", "wmrl", "pip"}  # torch: pinned by the Makefile (its build is the
# machine's); pip: whichever installs the hashed files installs the same files


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_tag() -> str:
    return (f"CPython {sys.version_info.major}.{sys.version_info.minor} on "
            f"{platform.system()} {platform.machine()}")


def write(report_path: Path, out: Path) -> int:
    report = json.loads(report_path.read_text())
    lines, missing = [], []
    for item in sorted(report["install"], key=lambda i: canonical(i["metadata"]["name"])):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if canonical(name) in LEFT_OUT:
            continue
        hashes = (item["download_info"].get("archive_info") or {}).get("hashes") or {}
        if "sha256" not in hashes:
            missing.append(name)
            continue
        lines.append(f"{canonical(name)}=={version} \\\n    --hash=sha256:{hashes['sha256']}")
    if missing:
        print(f"lock: no sha256 for {missing} (a local directory or VCS source?): not written",
              file=sys.stderr)
        return 1
    header = [
        "# The tested environment: what `make install` (and so CI) installs, exactly.",
        f"# For {platform_tag()}; torch is pinned by the Makefile (TORCH).",
        f"# Written by `make lock` on {datetime.date.today()} (scripts/lock.py): do not edit.",
    ]
    out.write_text("\n".join(header + lines) + "\n")
    print(f"lock: {len(lines)} packages -> {out}")
    return 0


def read_lock(path: Path) -> tuple[dict[str, str], str]:
    text = path.read_text()
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", text, flags=re.M))
    m = re.search(r"^# For (CPython [^;]+);", text, flags=re.M)
    return pins, (m.group(1) if m else "")


def diff(lock: Path) -> int:
    pins, _ = read_lock(lock)
    installed = {canonical(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()}
    rows = []
    for name, version in sorted(installed.items()):
        if name in LEFT_OUT:
            continue
        if name not in pins:
            rows.append(f"  {name} {version} (not in the lock)")
        elif pins[name] != version:
            rows.append(f"  {name} {pins[name]} -> {version}")
    rows += [f"  {n} {v} -> (gone)" for n, v in sorted(pins.items())
             if n not in installed]
    print(f"{len(rows)} packages differ from {lock}:" if rows else f"same versions as {lock}")
    if rows:
        print("\n".join(rows))
    return 0


def check_platform(lock: Path) -> int:
    """Exit 1 with a line saying what to do when this interpreter is not the lock's platform."""
    _, tag = read_lock(lock)
    if tag and tag != platform_tag():
        print(f"{lock} is the tested set for {tag}; this is {platform_tag()}. Install from "
              "pyproject.toml's ranges instead: `make install-ranges` (not the tested set).",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("report", type=Path)
    w.add_argument("--out", type=Path, required=True)
    d = sub.add_parser("diff")
    d.add_argument("lock", type=Path)
    c = sub.add_parser("check-platform")
    c.add_argument("lock", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "write":
        return write(a.report, a.out)
    if a.cmd == "diff":
        return diff(a.lock)
    return check_platform(a.lock)


if __name__ == "__main__":
    sys.exit(main())
