"""The documentation builds as a site (mkdocs.yml): `mkdocs build --strict` fails on a broken
link or anchor, a page missing from the nav, a nav entry without its page, and an API page
whose docstrings mkdocstrings cannot collect or render without a warning."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    assert (site / "index.html").is_file()
    assert (site / "api" / "core" / "index.html").is_file()
