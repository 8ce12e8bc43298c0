"""The README's Python examples run as written."""

import re
from pathlib import Path

import numpy as np

from jaxmb.models import random_tree_urdf

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2
    (tmp_path / "my_robot.urdf").write_text(random_tree_urdf(4, 0))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["robot"].n == 4
    assert np.isfinite(np.asarray(namespace["rmse"])).all()
    assert float(namespace["heavier"].body("link2").mass) == 75.0
