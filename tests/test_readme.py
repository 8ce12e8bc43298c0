"""The README's and docs/'s Python examples run as written; the README's layout is the package
tree's; every docs/ page is linked and every link to a page or a figure resolves."""

import re
from pathlib import Path

import numpy as np

from jaxmb.models import random_tree_urdf

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_readme_examples_run(tmp_path, monkeypatch):
    blocks = _python_blocks(README)
    assert len(blocks) >= 2
    (tmp_path / "my_robot.urdf").write_text(random_tree_urdf(4, 0))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["robot"].n == 4
    assert np.isfinite(np.asarray(namespace["rmse"])).all()
    assert float(namespace["heavier"].body("link2").mass) == 75.0


def test_docs_examples_run_on_their_own(tmp_path, monkeypatch):
    """Each page's examples in a namespace of their own: a reader copies a page's block alone."""
    monkeypatch.chdir(tmp_path)
    ran = 0
    for page in DOCS:
        namespace: dict = {}
        for block in _python_blocks(page):
            exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 - our own docs
            ran += 1
    assert ran >= 4


def _layout() -> dict[str, set[str]]:
    """The README's layout bullets: ``- `pkg/` ...: `a`, `b`, ...`` -> {pkg: {a, b}}."""
    text = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in text.splitlines():
        m = re.match(r"- `([\w/]+)/`[^:]*:(.*)", line)
        if m and (ROOT / m.group(1) / "__init__.py").is_file():
            out[m.group(1)] = set(re.findall(r"`(\w+)`", m.group(2))) - {"machines", "__init__"}
    return out


def test_readme_layout_is_the_package_tree():
    """Every package folder has its bullet, and each bullet names exactly its modules."""
    layout = _layout()
    packages = {"identification", "control"} | {
        str(p.parent.relative_to(ROOT)) for p in (ROOT / "jaxmb").rglob("__init__.py")
    }
    assert set(layout) == packages, (sorted(packages - set(layout)), sorted(set(layout) - packages))
    for pkg, named in layout.items():
        modules = {p.stem for p in (ROOT / pkg).glob("*.py")} - {"__init__"}
        assert named == modules, (pkg, sorted(named - modules), sorted(modules - named))


def test_every_docs_page_is_linked_and_links_resolve():
    readme = README.read_text()
    for page in DOCS:
        assert f"(docs/{page.name})" in readme, page.name
    for path in (README, *DOCS):
        for target in re.findall(r"\]\(([^)#]+\.(?:md|png))\)", path.read_text()):
            if not target.startswith("http"):
                assert (path.parent / target).resolve().is_file(), (path.name, target)
