"""Convert Weigand et al.'s KUKA KR300 R2500 recordings (MATLAB .mat) to jaxmb logs.

    python scripts/convert_kr300.py [--source DIR] [--out data/kr300]

For each trajectory X in A, B, C it writes

- ``kr300_traj_X.parquet``: the measurements, columns ``t`` (s), ``q1..q6`` (rad, model
  coordinates = KUKA axis angles), ``qd_q1..qd_q6`` (rad/s), ``tau_q1..tau_q6`` (joint-side
  torque G * motor torque, N m) and ``tau_motor_q1..tau_motor_q6`` (measured motor torque, N m);
- ``kr300_traj_X_authors_ff.parquet``: the authors' model feed-forward torque, joint side,
  columns ``t`` and ``tau_q1..tau_q6``;

each with a JSON sidecar of the same stem, plus LICENSE (MIT, copied) and nothing else. The
conversion is documented in data/kr300/README.md and checked by tests/test_kr300.py.
"""

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.io

from jaxmb.models.kr300 import GEAR_RATIOS, KR300_HOME

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "real" / "kuka-kr300-weigand"
TRAJECTORIES = ("A", "B", "C")
N = 6
G = np.array([float(g) for g in GEAR_RATIOS])

PROVENANCE = {
    "repository": "https://github.com/JonasWeigand/Robot_Identification",
    "commit": "9e403c07d9dadbb391a9f3921e8d219f714636a8",
    "licence": "MIT, Copyright (c) 2021 Jonas Weigand (full text in LICENSE beside this file)",
    "authors": "J. Weigand, J. Ulmen, A. Janot, M. Ruskowski (TU Kaiserslautern / DFKI / ONERA)",
    "robot": "KUKA KR300 R2500 ultra (Quantec), 6 axes, real measurement on 2020-10-21",
}
ORIGINAL = "data/recorded_trajectories/2020-10-21 10s FF {X} 08ms/data.mat"
ROLE = {"A": "train (the authors' identification trajectory)", "B": "test", "C": "test"}


def load(path: Path):
    """The .mat file's variables as attribute structs (scipy's MATLAB reader)."""
    return scipy.io.loadmat(path, squeeze_me=True, struct_as_record=False)


def measurement_columns(mat) -> dict[str, np.ndarray]:
    """The measured signals in jaxmb's log convention (module doc).

    Positions: ``act_pos_mot_deg`` (motor encoders scaled to the joint) is relative to the home
    pose with KUKA's directions, so q = rad(pos) + KR300_HOME. Torque: ``act_torque_abs_nm`` is
    the motor torque, positive in the joint's positive direction; joint side = G * motor."""
    rec = mat["rec"]
    cols = {"t": np.asarray(rec.time_cont, dtype=np.float64)}
    pos = np.deg2rad(np.asarray(rec.act_pos_mot_deg, dtype=np.float64))
    vel = np.deg2rad(np.asarray(rec.act_vel_mot_deg_per_s, dtype=np.float64))
    tau_m = np.asarray(rec.act_torque_abs_nm, dtype=np.float64)
    for i in range(N):
        cols[f"q{i + 1}"] = pos[i] + KR300_HOME[i]
    for i in range(N):
        cols[f"qd_q{i + 1}"] = vel[i]
    for i in range(N):
        cols[f"tau_q{i + 1}"] = G[i] * tau_m[i]
    for i in range(N):
        cols[f"tau_motor_q{i + 1}"] = tau_m[i]
    return cols


def authors_ff_columns(mat) -> dict[str, np.ndarray]:
    """The authors' feed-forward torque at the joint: ``G * (tau_ff_all + tau_ff_init)``.

    ``tau_ff_all`` is motor side and stored relative to its first sample ``tau_ff_init``
    (the authors' Robot_reference_dynamics.m divides the joint torque by the gear ratio and
    subtracts the first sample)."""
    ff = (
        np.asarray(mat["tau_ff_all"], dtype=np.float64)
        + np.asarray(mat["tau_ff_init"], dtype=np.float64)[:, None]
    )
    cols = {"t": np.asarray(mat["rec"].time_cont, dtype=np.float64)}
    for i in range(N):
        cols[f"tau_q{i + 1}"] = G[i] * ff[i]
    return cols


def _check_gear_ratios(mat, name: str) -> None:
    u = np.asarray(mat["para"].u, dtype=np.float64)
    if not np.allclose(u, G, rtol=1e-12, atol=0):
        raise ValueError(f"{name}: para.u = {u} differs from the published gear ratios {G}")


def _write(cols: dict[str, np.ndarray], sidecar: dict, out: Path, stem: str) -> None:
    n = {len(v) for v in cols.values()}
    if len(n) != 1:
        raise ValueError(f"{stem}: columns of different lengths {n}")
    table = pa.table({k: pa.array(v, type=pa.float64()) for k, v in cols.items()})
    pq.write_table(table, out / f"{stem}.parquet", compression="zstd")
    (out / f"{stem}.json").write_text(json.dumps(sidecar, indent=2) + "\n")


def _units(cols) -> dict[str, str]:
    def unit(c):
        if c == "t":
            return "s"
        if c.startswith("qd_"):
            return "rad/s"
        if c.startswith("tau_"):
            return "N m"
        return "rad"

    return {c: unit(c) for c in cols}


def convert(source: Path, out: Path) -> list[Path]:
    """Convert all three trajectories; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    for X in TRAJECTORIES:
        src = source / f"recorded_traj_{X}.mat"
        if not src.exists():
            raise ValueError(f"--source: {src} not found")
        mat = load(src)
        _check_gear_ratios(mat, src.name)
        prov = {
            **PROVENANCE,
            "original_path": ORIGINAL.format(X=X),
            "copied_as": f"recorded_traj_{X}.mat",
            "trajectory": f"{X}: {mat['traj_name']}; role in the authors' work: {ROLE[X]}",
        }
        cols = measurement_columns(mat)
        sensors = {
            "q": "rec.act_pos_mot_deg: motor encoders scaled to the joint; converted to rad and "
            "shifted by the home pose [0, -90, 90, 0, 0, 0] deg to the model's axis angles",
            "qd": "rec.act_vel_mot_deg_per_s: motor-encoder velocity, converted to rad/s",
            "tau": "G * rec.act_torque_abs_nm, G the exact gear ratios (para.u); joint side, "
            "includes motor inertia and friction, positive along the joint's positive direction",
            "tau_motor": "rec.act_torque_abs_nm: motor-side torque of the drive, N m",
            "sampling": "250 Hz (0.004 s), 2501 samples, 10 s",
        }
        side = {
            "model": "kr300",
            "synthetic": False,
            "sensors": sensors,
            "provenance": {
                **prov,
                "converted": "rec.* signals only, by scripts/convert_kr300.py (jaxmb); "
                "no filtering or resampling",
            },
            "units": _units(cols),
        }
        _write(cols, side, out, f"kr300_traj_{X}")

        ff = authors_ff_columns(mat)
        note = (
            "The authors' model feed-forward torque, not a measurement: "
            "G * (tau_ff_all + tau_ff_init), computed by them from the reference trajectory "
            "ref_kin with their rigid-body model, counterbalance and identified friction, and "
            "sent to the drives during the recording."
        )
        if X == "A":
            note += (
                " For A the stored torque lacks the constant gravity + counterbalance load of the "
                "start pose (tau_g_init, about [0, -1995, -2630, -25, -503, 0] N m joint side): "
                "tau_ff_init of A holds only the friction offset f_asym."
            )
        side_ff = {
            "model": "kr300",
            "synthetic": True,
            "kind": "authors_model_output",
            "note": note,
            "sensors": {"tau": note},
            "provenance": {
                **prov,
                "converted": "tau_ff_all, tau_ff_init and para.u by scripts/convert_kr300.py",
            },
            "units": _units(ff),
        }
        _write(ff, side_ff, out, f"kr300_traj_{X}_authors_ff")
    shutil.copyfile(source / "LICENSE", out / "LICENSE")
    return sorted(out.iterdir())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--out", type=Path, default=REPO / "data" / "kr300")
    args = ap.parse_args(argv)
    for p in convert(args.source, args.out):
        print(p)


if __name__ == "__main__":
    main()
