"""The identified parameters' joint uncertainty as a file beside ``params.json`` (which names it
under ``"covariance"``): the full covariance matrix in the parametrisation each fit used, so
that a study can draw models the data allow, correlations included (the marginal stds of
``params.json``'s ``uncertainty`` describe models the data have ruled out: on a hydraulic
machine the valve edges go with the bulk modulus, the masses with the friction).

Layout::

    {"format": "jaxmb-covariance", "version": 1,
     "parameters": [{"name": ..., "value": ..., "std": ..., "parametrisation": "log" | "linear",
                     "stage": ...}, ...],
     "covariance": [[...], ...],        # (P, P), row-major, in the parameters' order
     "undetermined": [names], "note": ...}

A ``"log"`` parameter's coordinate is ``log(value)`` (positive quantities: valve coefficients,
bulk moduli, masses in output error), so ``std = value * sqrt(C_kk)`` to first order; a
``"linear"`` one's is the value itself (base parameters, stage 1's inertial parameters, a
centre coordinate), ``std = sqrt(C_kk)``. A parameter the data do not determine (an infinite
std, written ``"inf"``) has zero rows and columns and is listed under ``undetermined``; blocks
of separate fits (a hydraulic machine's stage 1 and stage 2) are uncorrelated in the file,
which its ``note`` says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxmb.version import __version__

__all__ = ["FORMAT", "PARAMETRISATIONS", "read_covariance", "write_covariance"]

FORMAT = "jaxmb-covariance"
PARAMETRISATIONS = ("log", "linear")
# symmetric and positive semidefinite to this share of the largest diagonal entry
_TOL = 1e-9


def write_covariance(
    path,
    names: Sequence[str],
    values: Sequence[float] | np.ndarray,
    covariance: np.ndarray,
    parametrisation: Sequence[str],
    *,
    stage: Sequence[str] | None = None,
    undetermined: Sequence[str] = (),
    note: str = "",
) -> Path:
    """Write the file (module docstring) and return its path; the matrix is checked as
    `read_covariance` checks it, so a file that is written can be read."""
    C = np.asarray(covariance, float)
    doc = {
        "format": FORMAT,
        "version": 1,
        "jaxmb": __version__,
        "parameters": [
            {
                "name": n,
                "value": float(v),
                "std": "inf" if n in undetermined else _std(float(v), C[k, k], p),
                "parametrisation": p,
                **({"stage": stage[k]} if stage is not None else {}),
            }
            for k, (n, v, p) in enumerate(zip(names, values, parametrisation, strict=True))
        ],  # fmt: skip
        "covariance": C.tolist(),
        "undetermined": list(undetermined),
        "note": note,
    }
    path = Path(path)
    _check(doc, path)
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return path


def _std(value: float, var: float, parametrisation: str) -> float:
    s = float(np.sqrt(max(var, 0.0)))
    return abs(value) * s if parametrisation == "log" else s


def read_covariance(path) -> dict:
    """The file at ``path`` as ``{"names", "values", "std", "parametrisation", "covariance"
    (P, P), "undetermined", "note"}``; refuses, naming the file and what is wrong, a file that
    is not one, names given twice, an unknown parametrisation, a matrix of another size, not
    symmetric or not positive semidefinite."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"covariance file {str(path)!r}: no such file") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"covariance file {path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"covariance file {path}: not a jaxmb covariance file (format)")
    _check(doc, path)
    rows = doc["parameters"]
    return {
        "names": [r["name"] for r in rows],
        "values": np.array([r["value"] for r in rows], float),
        "std": np.array([r["std"] for r in rows], float),
        "parametrisation": [r["parametrisation"] for r in rows],
        "covariance": np.asarray(doc["covariance"], float),
        "undetermined": list(doc.get("undetermined", [])),
        "note": doc.get("note", ""),
    }


def _check(doc: dict, path: Path) -> None:
    rows = doc.get("parameters")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"covariance file {path}: 'parameters' must be a non-empty list")
    names = [r.get("name") for r in rows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"covariance file {path}: parameter(s) {twice} given twice")
    bad = [r.get("name") for r in rows if r.get("parametrisation") not in PARAMETRISATIONS]
    if bad:
        raise ValueError(
            f"covariance file {path}: parameter(s) {bad}: parametrisation must be one of "
            f"{PARAMETRISATIONS}"
        )
    C = np.asarray(doc.get("covariance"), float)
    P = len(rows)
    if C.shape != (P, P) or not np.all(np.isfinite(C)):
        raise ValueError(
            f"covariance file {path}: 'covariance' must be a finite {P} x {P} matrix (one row "
            f"per parameter), got shape {C.shape}"
        )
    scale = max(float(np.max(np.abs(np.diag(C)))), np.finfo(float).tiny)
    if np.max(np.abs(C - C.T)) > _TOL * scale:
        raise ValueError(f"covariance file {path}: 'covariance' is not symmetric")
    low = float(np.min(np.linalg.eigvalsh(0.5 * (C + C.T))))
    if low < -_TOL * scale:
        raise ValueError(
            f"covariance file {path}: 'covariance' is not positive semidefinite (an eigenvalue "
            f"{low:.3g})"
        )
    unknown = [n for n in doc.get("undetermined", []) if n not in names]
    if unknown:
        raise ValueError(f"covariance file {path}: undetermined {unknown} are not parameters")
