"""Every relative markdown link in README.md, strategies/README.md and docs/**/*.md names a file
that exists, and every ``#anchor`` a heading of the file it points to (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", ROOT / "strategies" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]
CODE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, backticks and punctuation dropped, spaces -> -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    for m in re.finditer(r"^#{1,6} (.*)$", CODE.sub("", path.read_text()), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def test_slug_matches_github():
    assert slug("PACE with the KL penalty (`experiment=pace`, β = 0.1, 3 seeds)") == \
        "pace-with-the-kl-penalty-experimentpace-β--01-3-seeds"
    assert slug("Weight sync (trainer → rollout workers)") == "weight-sync-trainer--rollout-workers"


def test_relative_links_resolve():
    bad = []
    for f in FILES:
        for target in re.findall(r"\]\(([^)\s]+)\)", CODE.sub("", f.read_text())):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (f.parent / path).resolve() if path else f
            where = f"{f.relative_to(ROOT)}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where} (no such heading)")
    assert not bad, "\n".join(bad)
