"""Packaging: identification/ and control/ install under jaxmb, never as top-level packages."""

import os
import subprocess
import sys
from pathlib import Path

import jaxmb.control
import jaxmb.identification

ROOT = Path(__file__).resolve().parents[1]


def test_editable_install_maps_subpackages():
    assert Path(jaxmb.control.__file__).resolve() == ROOT / "control" / "__init__.py"
    assert Path(jaxmb.identification.__file__).resolve() == ROOT / "identification" / "__init__.py"


def test_no_top_level_control_module_is_installed():
    """Run from / so that the source tree is not on sys.path: only what is installed counts."""
    code = (
        "import importlib.metadata as md, importlib.util as u, pathlib;"
        "tops = {pathlib.Path(str(f)).parts[0] for f in (md.files('jaxmb') or [])};"
        "print(sorted(tops));"
        "s = u.find_spec('control'); print(s.origin if s else None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout.splitlines()
    tops, origin = out[0], out[1]
    assert "'control'" not in tops and "'identification'" not in tops, tops
    assert origin == "None" or str(ROOT) not in origin  # python-control may exist; ours must not


def test_regular_install_gives_working_imports(tmp_path):
    """`pip install .` (a built wheel, not editable) into a scratch folder."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    assert not (target / "control").exists() and not (target / "identification").exists()
    assert (target / "jaxmb" / "control" / "__init__.py").exists()
    # the built-in machines are files the installed package reads
    machines = target / "jaxmb" / "models" / "machines"
    assert (machines / "lift_tilt_crane.toml").is_file()
    assert (machines / "lift_tilt_crane.urdf").is_file()
    code = (
        "import jaxmb, jaxmb.control, jaxmb.identification, jaxmb.models;"
        "print(jaxmb.__file__); print(jaxmb.control.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    ).stdout.split()
    assert all(p.startswith(str(target)) for p in out), out
