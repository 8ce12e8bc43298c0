"""The log format: exact round trips through CSV and Parquet, unit conversion, schemas built from
the arm and the crane, and one rejection per kind of malformed log (the message names the
column). References are the values written (round trips), the unit definitions (1 deg = pi/180
rad, 1 bar = 1e5 Pa, 1 mm = 1e-3 m) and the spec's column lists."""

import json
import math

import jax
import numpy as np
import pytest

import jaxmb
from jaxmb.io.log_sampling import resample, sampling_report
from jaxmb.io.logs import Log, LogError, read_log, schema_for, validate_log, write_log

FS = 1000.0  # Hz, as the spec's logs
N = 600


@pytest.fixture(scope="module")
def arm_schema():
    return schema_for(jaxmb.models.series_parallel_3dof())


@pytest.fixture(scope="module")
def crane_plant():
    return jaxmb.models.crane.lift_tilt_crane_plant()


@pytest.fixture(scope="module")
def crane_schema(crane_plant):
    return schema_for(crane_plant)


ARM_REQUIRED = ("phi", "theta", "delta", "tau_phi", "tau_theta", "tau_delta")
# shared/specs/lift_tilt_crane.md, "What a logged experiment holds"
CRANE_SPEC_COLUMNS = (
    "q1",
    "q2",
    "p_a_lift",
    "p_b_lift",
    "p_a_tilt",
    "p_b_tilt",
    "u_lift",
    "u_tilt",
    "x_lift",
    "x_tilt",
)


def _time(n=N):
    return np.arange(n) / FS


def arm_columns(n=N, seed=0) -> dict[str, np.ndarray]:
    """A plausible arm log in SI: angles within +-1 rad, delta in [0.05, 0.15] m, torques."""
    rng = np.random.default_rng(seed)
    t = _time(n)
    w = 2 * np.pi * np.array([0.7, 1.1, 1.9])
    return {
        "t": t,
        "phi": 1.0 * np.sin(w[0] * t),
        "theta": 0.5 * np.sin(w[1] * t + 0.3),
        "delta": 0.1 + 0.05 * np.sin(w[2] * t),
        "qd_phi": 1.0 * w[0] * np.cos(w[0] * t),
        "tau_phi": 100 * np.sin(w[0] * t) + rng.normal(0, 1, n),
        "tau_theta": 900 + 50 * np.cos(w[1] * t) + rng.normal(0, 1, n),
        "tau_delta": 2000 + 30 * np.sin(w[2] * t) + rng.normal(0, 1, n),
    }


def crane_columns(n=N) -> dict[str, np.ndarray]:
    """The spec's crane columns with plausible SI values (Pa around 40-120 bar, V, m)."""
    t = _time(n)
    s = np.sin(2 * np.pi * 0.5 * t)
    return {
        "t": t,
        "q1": 0.4 + 0.2 * s,
        "q2": -0.3 + 0.3 * s,
        "p_a_lift": 80e5 + 20e5 * s,
        "p_b_lift": 40e5 - 5e5 * s,
        "p_a_tilt": 60e5 + 10e5 * s,
        "p_b_tilt": 45e5 + 3e5 * s,
        "u_lift": 2.0 * s,
        "u_tilt": -3.0 * s,
        "x_lift": 0.3 + 0.05 * s,
        "x_tilt": 0.4 - 0.08 * s,
    }


def _write_raw_csv(path, cols: dict, meta: dict | None = None):
    """A CSV written without the code under test (numpy, 17 significant digits)."""
    names = list(cols)
    data = np.column_stack([cols[k] for k in names])
    np.savetxt(path, data, delimiter=",", header=",".join(names), comments="", fmt="%.17g")
    if meta is not None:
        path.with_suffix(".json").write_text(json.dumps(meta))
    return path


# --------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_round_trip_is_exact(tmp_path, ext, arm_schema):
    """Values spanning 600 orders of magnitude, negative zero and subnormals come back bit for
    bit; so do the column order and the sidecar (unknown keys kept)."""
    rng = np.random.default_rng(1)
    cols = arm_columns()
    t = cols.pop("t")
    wild = rng.normal(size=N) * 10.0 ** rng.integers(-300, 300, N)
    wild[:4] = [-0.0, 5e-324, 1.7976931348623157e308, 0.1]
    cols["tau_theta"] = wild
    meta = {
        "model": "arm",
        "synthetic": True,
        "provenance": {"source": "test", "licence": "CC0"},
        "sensors": "encoders 20 bit",
        "operator": "unknown keys are kept",
    }
    path = write_log(tmp_path / f"run1.{ext}", t, cols, meta=meta)
    assert path.with_suffix(".json").exists()
    log = read_log(path)
    assert log.names == tuple(cols)
    assert np.array_equal(log.t, t)
    for k, v in cols.items():
        # bitwise: same bytes, so -0.0 and subnormals are preserved too
        assert log[k].tobytes() == np.asarray(v, dtype=np.float64).tobytes(), k
    assert log.meta == meta
    # and a second pass changes nothing
    again = read_log(write_log(tmp_path / f"run2.{ext}", log))
    assert again.sidecar == log.sidecar and again.names == log.names
    assert all(np.array_equal(again[k], log[k]) for k in log.names)


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_units_are_converted_once_and_recorded(tmp_path, ext, crane_schema):
    si = crane_columns()
    raw = dict(si)
    raw["q1"] = np.rad2deg(si["q1"])
    raw["p_a_lift"] = si["p_a_lift"] / 1e5
    raw["x_tilt"] = si["x_tilt"] * 1e3
    units = {"q1": "deg", "p_a_lift": "bar", "x_tilt": "mm", "u_lift": "V"}
    t = raw.pop("t")
    path = write_log(tmp_path / f"conv.{ext}", t, raw, meta={"units": units})
    log = read_log(path, crane_schema, required=CRANE_SPEC_COLUMNS)
    # the definitions of the units, applied by the test
    np.testing.assert_array_equal(log["q1"], raw["q1"] * (math.pi / 180))
    np.testing.assert_array_equal(log["p_a_lift"], raw["p_a_lift"] * 1e5)
    np.testing.assert_array_equal(log["x_tilt"], raw["x_tilt"] * 1e-3)
    # and against the SI values we started from (round-off of the two conversions only)
    for k in ("q1", "p_a_lift", "x_tilt"):
        np.testing.assert_allclose(log[k], si[k], rtol=1e-15, atol=0)
    np.testing.assert_array_equal(log["u_lift"], si["u_lift"])
    assert log.meta["converted_units"] == {"q1": "deg", "p_a_lift": "bar", "x_tilt": "mm"}
    assert log.meta["units"] == {"u_lift": "V"}  # SI spellings stay
    # writing the SI log back and reading it again converts nothing a second time
    again = read_log(write_log(tmp_path / f"conv2.{ext}", log), crane_schema)
    for k in log.names:
        assert np.array_equal(again[k], log[k]), k
    assert again.meta == log.meta
    # nor does a machine file's [log] unit for a column the sidecar records as converted
    file_units = {"p_a_lift": "bar", "q1": "deg"}
    again = read_log(tmp_path / f"conv2.{ext}", crane_schema, units=file_units)
    for k in log.names:
        assert np.array_equal(again[k], log[k]), k
    # while a column not converted before takes the file's unit
    fresh = write_log(
        tmp_path / f"raw.{ext}", t, raw, meta={"units": {"q1": "deg", "x_tilt": "mm"}}
    )
    once = read_log(fresh, crane_schema, units={"p_a_lift": "bar"})
    np.testing.assert_array_equal(once["p_a_lift"], raw["p_a_lift"] * 1e5)


def test_reads_a_csv_written_by_other_tools(tmp_path, arm_schema):
    """A numpy-written CSV (17 significant digits) loads with its exact values and validates."""
    cols = arm_columns()
    log = read_log(_write_raw_csv(tmp_path / "np.csv", cols), arm_schema, required=ARM_REQUIRED)
    for k, v in cols.items():
        assert np.array_equal(log[k], v), k
    assert log.meta == {}


# --------------------------------------------------------------------------------------- schemas


def test_arm_schema_kinds(arm_schema):
    kinds = arm_schema.kinds
    assert arm_schema.coordinates == ("phi", "theta", "delta")
    assert kinds["phi"] == "angle" and kinds["qd_theta"] == "angular_velocity"
    assert kinds["tau_phi"] == "torque" and kinds["tau_motor_phi"] == "motor_torque"
    assert kinds["i_theta"] == "current"
    # delta is hidden in the coordinate map: revolute by default, prismatic on request
    assert kinds["delta"] == "angle"
    model = jaxmb.models.series_parallel_3dof()
    k2 = schema_for(model, joint_types={"delta": "prismatic"}).kinds
    assert k2["delta"] == "length" and k2["qdd_delta"] == "linear_acceleration"
    assert k2["tau_delta"] == "force"
    with pytest.raises(ValueError, match="joint_types: unknown coordinate 'zeta'"):
        schema_for(model, joint_types={"zeta": "prismatic"})


def test_schema_reads_joint_types_from_frames():
    """The dependent-coordinate arm has no coordinate map; its spec says ``s`` is the
    cylinder's length (prismatic) and ``zeta``, ``alpha`` are angles."""
    model = jaxmb.models.series_parallel_3dof_dependent().model
    kinds = schema_for(model).kinds
    assert kinds["s"] == "length" and kinds["qd_s"] == "linear_velocity"
    assert kinds["zeta"] == "angle" and kinds["alpha"] == "angle"


def test_crane_schema_matches_the_plant(crane_plant, crane_schema):
    """Every signal the plant itself names (commands and `HydraulicPlant.signals`) is a column
    of the schema, except the friction and spool diagnostics outside the format."""
    assert crane_schema.actuators == ("lift", "tilt")
    assert set(crane_plant.command_names) <= set(crane_schema.names)
    jnp = jax.numpy
    y = {
        "q": jnp.array([0.4, -0.3]),
        "qd": jnp.zeros(2),
        "actuators": {
            a.name: a.initial_state(jnp.array(80e5), jnp.array(40e5)) for a in crane_plant.actuators
        },
    }
    # only the names matter: trace, do not run
    sig = jax.eval_shape(crane_plant.signals, y, jnp.zeros(2))
    logged = {k for k in sig if not k.startswith(("f_friction_", "spool_"))}
    assert logged <= set(crane_schema.names), logged - set(crane_schema.names)
    assert set(CRANE_SPEC_COLUMNS) <= set(crane_schema.names)
    assert (
        crane_schema.kinds["p_a_lift"] == "pressure" and crane_schema.kinds["u_tilt"] == "voltage"
    )
    assert "tau_motor_q1" not in crane_schema.names  # no electric drives on this plant


def test_crane_spec_log_validates(tmp_path, crane_schema):
    cols = crane_columns()
    log = read_log(
        _write_raw_csv(tmp_path / "crane.csv", cols, {"model": "crane", "synthetic": True}),
        crane_schema,
        required=CRANE_SPEC_COLUMNS,
        n_parameters=50,
    )
    assert log.names == CRANE_SPEC_COLUMNS


# ------------------------------------------------------------------------------ malformed logs


def _drop(c, k):
    c.pop(k)


def _rename(c, old, new):
    c[new] = c.pop(old)


def _set(c, k, idx, v):
    c[k] = c[k].copy()
    c[k][idx] = v


def _swap_times(c):
    t = c["t"].copy()
    t[10], t[11] = t[11], t[10]
    c["t"] = t


def _scale(c, k, f):
    c[k] = c[k] * f


MALFORMED = {
    "missing column": (
        "arm",
        lambda c: _drop(c, "tau_theta"),
        {},
        r"missing required column 'tau_theta' \(torque, N m\)",
    ),
    "unknown column": (
        "arm",
        lambda c: _rename(c, "qd_phi", "qd_ph"),
        {},
        r"unknown column 'qd_ph'\. Did you mean 'qd_phi'\?",
    ),
    "no time column": ("arm", lambda c: _rename(c, "t", "time"), {}, r"no 't' column"),
    "non-monotonic time": (
        "arm",
        _swap_times,
        {},
        r"column 't': time is not monotonic at index 11: t\[10\] = 0\.011 s, t\[11\] = 0\.01 s",
    ),
    "duplicated time": (
        "arm",
        lambda c: _set(c, "t", 20, 0.019),
        {},
        r"column 't': duplicated time stamp at index 20: t\[19\] = t\[20\] = 0\.019 s",
    ),
    "NaN gap": (
        "arm",
        lambda c: _set(c, "theta", slice(100, 110), np.nan),
        {},
        r"column 'theta': 10 NaN values \(first at index 100, t = 0\.1 s\)",
    ),
    "inf": (
        "arm",
        lambda c: _set(c, "tau_phi", 5, -np.inf),
        {},
        r"column 'tau_phi': 1 infinite values \(first at index 5",
    ),
    "degrees in a revolute column": (
        "arm",
        lambda c: _scale(c, "phi", 180 / np.pi),
        {},
        r"column 'phi': max \|value\| = 57\.\d+ > 4 pi .* looks like degrees",
    ),
    "deg/s in a velocity column": (
        "arm",
        lambda c: _scale(c, "qd_phi", 180 / np.pi * 5),
        {},
        r"column 'qd_phi': .* looks like deg/s",
    ),
    "bar in a pressure column": (
        "crane",
        lambda c: _scale(c, "p_b_tilt", 1e-5),
        {},
        r"column 'p_b_tilt': max \|value\| = 48 < 1000 Pa .* looks like bar",
    ),
    "mm in a piston column": (
        "crane",
        lambda c: _scale(c, "x_lift", 1e3),
        {},
        r"column 'x_lift': .* looks like mm",
    ),
    "constant signal": (
        "crane",
        lambda c: _set(c, "u_tilt", slice(None), 0.0),
        {},
        r"column 'u_tilt' is constant \(= 0\.0\); a constant signal carries no information",
    ),
    "too few samples": (
        "arm",
        lambda c: None,
        {"n_parameters": 3 * N + 1},
        rf"too few samples: {N} samples x 3 equation columns .* = {3 * N} equations "
        rf"< {3 * N + 1} parameters",
    ),
    "text in a number column": (
        "arm",
        lambda c: _set(c, "delta", 3, np.nan),  # replaced by text below
        {"text": ("delta", 3)},
        r"column 'delta': expected numbers",
    ),
    "unknown unit": (
        "crane",
        lambda c: None,
        {"units": {"p_a_lift": "psi"}},
        r"column 'p_a_lift': unknown unit 'psi'",
    ),
    "unit of the wrong dimension": (
        "crane",
        lambda c: None,
        {"units": {"p_a_lift": "deg"}},
        r"column 'p_a_lift' is a pressure .* declared as 'deg'",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_rejects_malformed_log(tmp_path, case, arm_schema, crane_schema):
    which, mutate, opts, match = MALFORMED[case]
    cols = arm_columns() if which == "arm" else crane_columns()
    schema = arm_schema if which == "arm" else crane_schema
    required = ARM_REQUIRED if which == "arm" else CRANE_SPEC_COLUMNS
    mutate(cols)
    meta = {"units": opts["units"]} if "units" in opts else None
    path = _write_raw_csv(tmp_path / "bad.csv", cols, meta)
    if "text" in opts:  # corrupt one cell with text
        col, row = opts["text"]
        lines = path.read_text().splitlines()
        j = list(cols).index(col)
        cells = lines[row + 1].split(",")
        cells[j] = "n/a?"
        lines[row + 1] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogError, match=match) as err:
        read_log(path, schema, required=required, n_parameters=opts.get("n_parameters"))
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith("bad.csv: ")  # the file is named too


def test_unmodified_logs_pass(arm_schema, crane_schema):
    """The fixtures of the malformed cases are valid before mutation (the checks can pass)."""
    for cols, schema, req in (
        (arm_columns(), arm_schema, ARM_REQUIRED),
        (crane_columns(), crane_schema, CRANE_SPEC_COLUMNS),
    ):
        t = cols.pop("t")
        validate_log(Log(t, cols), schema, required=req, n_parameters=3 * N)


def test_all_problems_are_reported_together(arm_schema):
    cols = arm_columns()
    t = cols.pop("t")
    cols["phi"] = cols["phi"] * 180 / np.pi
    cols["thetaa"] = cols.pop("theta")
    with pytest.raises(LogError, match="3 problems") as err:
        validate_log(Log(t, cols), arm_schema, required=ARM_REQUIRED)
    msg = str(err.value)
    assert "missing required column 'theta'" in msg
    assert "unknown column 'thetaa'. Did you mean 'theta'?" in msg
    assert "column 'phi'" in msg and "degrees" in msg


def test_gap_too_long_to_resample(tmp_path, arm_schema):
    """Irregular sampling loads (it is reported, not rejected); resample refuses the gap."""
    cols = arm_columns()
    keep = np.ones(N, bool)
    keep[200:250] = False  # 50 ms without samples, from t = 0.199 s to 0.25 s
    cols = {k: v[keep] for k, v in cols.items()}
    log = read_log(_write_raw_csv(tmp_path / "gap.csv", cols), arm_schema, required=ARM_REQUIRED)
    rep = sampling_report(log)
    assert rep.n_gaps == 1 and rep.gaps == ((0.199, 0.25),) and not rep.uniform
    assert rep.dt == pytest.approx(1e-3, rel=1e-9)
    with pytest.raises(LogError, match=r"column 't': gap of .* from t = 0\.199 s to 0\.25 s"):
        resample(log)
    with pytest.raises(LogError, match=r"gap .* longer than max_gap = 0\.01 s"):
        resample(log, max_gap=0.01)
    # with the gap allowed, the grid is uniform and spans the log
    r = resample(log, max_gap=0.06)
    assert sampling_report(r).uniform and r.t[0] == log.t[0] and r.t[-1] == log.t[-1]
    assert r.meta["processing"][-1]["resample"]["method"] == "linear"


# ------------------------------------------------------------------------------------ Log helpers


def test_log_helpers():
    cols = arm_columns()
    t = cols.pop("t")
    log = Log(t, cols, {"model": "arm"})
    assert log.n == N and log.dt == pytest.approx(1 / FS, rel=1e-12)
    assert log.has("t") and log.has("phi") and not log.has("q1")
    assert log.stack(["phi", "delta"]).shape == (N, 2)
    np.testing.assert_array_equal(log.stack(["delta"])[:, 0], cols["delta"])
    w = log.window(0.1, 0.2)
    assert w.t[0] == pytest.approx(0.1) and w.t[-1] == pytest.approx(0.2) and w.n == 101
    np.testing.assert_array_equal(w["phi"], cols["phi"][100:201])
    new = log.with_signals(phi=np.zeros(N), tau_motor_phi=np.ones(N))
    assert new.names == (*log.names, "tau_motor_phi")  # replaced in place, added at the end
    assert (new["phi"] == 0).all() and (log["phi"] == cols["phi"]).all()  # log unchanged
    with pytest.raises(ValueError, match=r"no column 'tau_ph' \(did you mean 'tau_phi'\?\)"):
        log["tau_ph"]
    with pytest.raises(ValueError, match="column 'phi': expected 600 samples"):
        Log(t, {"phi": t[:10]})
    with pytest.raises(ValueError):  # logs are immutable host data
        log["phi"][0] = 1.0
    # pytree operations keep file order (jax sorts dict keys) and the sidecar
    doubled = jax.tree.map(lambda x: 2 * x, log)
    assert doubled.names == log.names and doubled.meta == {"model": "arm"}
    np.testing.assert_array_equal(doubled["tau_delta"], 2 * cols["tau_delta"])
    assert log.with_meta(synthetic=True).meta == {"model": "arm", "synthetic": True}


@pytest.mark.parametrize(
    "written, named, match",
    [
        ("parquet", "run.csv", r"run\.csv: the file is Parquet .* not CSV as its name says; "
         r"rename it to 'run\.parquet'"),
        ("csv", "run.parquet", r"run\.parquet: expected a Parquet file .*; the file is CSV text; "
         r"rename it to \.csv"),
    ],
)  # fmt: skip
def test_a_file_whose_content_is_not_the_format_its_name_claims(
    tmp_path, written, named, match, arm_schema
):
    """Issue 29: a Parquet file named .csv (and the reverse) is refused by its content, naming
    the file and the fix, instead of a UTF-8 decode error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = arm_columns()
    path = tmp_path / named
    if written == "csv":
        _write_raw_csv(path, cols)
    else:  # written by pyarrow itself, not by the code under test
        pq.write_table(pa.table({k: np.asarray(v) for k, v in cols.items()}), path)
    with pytest.raises(LogError, match=match):
        read_log(path, arm_schema, required=ARM_REQUIRED)
