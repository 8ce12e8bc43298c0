"""Monte Carlo studies (jaxmb.control.montecarlo, studies, study_config, `jaxmb montecarlo`).

Checked: a sample's figures against an independent `simulate` of the same perturbed plant;
failed solves recorded with their parameters and null figures; the same results whatever the
chunk size, the device count (4 forced host devices) and the process count (two processes under
jax.distributed); a study killed part-way resumes to the same file; the CLI's report;
configuration errors that name the key. The crane's study is checked in
tests/test_crane_tuning.py, where `jaxmb tune` validates gains on it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import unlisted

from jaxmb.control import study_config
from jaxmb.control.montecarlo import chunk_runner, run_study
from jaxmb.control.summary_keys import MONTECARLO, MONTECARLO_FILES
from jaxmb.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
ARM_TOML = (REPO / "data" / "montecarlo_section_iv.toml").read_text()
assert 'method = "rodas4"' in ARM_TOML  # what small_arm_config swaps for the tests' solver
PYTHON = sys.executable


def small_arm_config(tmp: Path, *, t_final=1.5, lanes=2, method="tsit5", extra="") -> Path:
    """The shipped Section IV study, shortened for tests (same parameters and distribution)."""
    text = (
        ARM_TOML.replace("t_final = 20.0", f"t_final = {t_final}")
        .replace("settle = 5.0", "settle = 0.75")
        .replace("lanes = 32", f"lanes = {lanes}")
        .replace('method = "rodas4"', f'method = "{method}"')
    )
    path = tmp / "study.toml"
    path.write_text(text + extra)
    return path


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mc")
    cfg = study_config.load_config(small_arm_config(tmp))
    study, ctrl, _, _, lanes, desc = study_config.build_study(cfg, samples=6, chunk=4)
    return {"tmp": tmp, "study": study, "controller": ctrl, "lanes": lanes, "desc": desc}


@pytest.fixture(scope="module")
def reference_run(arm):
    """An uninterrupted in-process study on one device, chunks of 4: the reference."""
    out = arm["tmp"] / "reference"
    table = run_study(
        arm["study"], arm["controller"], out, samples=6, chunk=4, description=arm["desc"],
        progress=False, lanes=arm["lanes"],
    )  # fmt: skip
    return out, table


def test_rows_match_an_independent_simulation(arm, reference_run):
    _, table = reference_run
    study, ctrl = arm["study"], arm["controller"]
    assert table.num_rows == 6
    assert np.asarray(table["sample"]).tolist() == list(range(6))
    names = study.parameter_names
    for c in ("rmse_phi", "max_error_delta", "dbar_theta", "bound_held", "effort_limit_time_phi",
              "stroke_exit_time", "failed", *names):  # fmt: skip
        assert c in table.column_names
    # sample 3 by hand: its values, its plant, one plain simulate of the full arm (the same
    # solve un-batched: equal to round-off amplified by the rtol 1e-6 step control)
    k = 3
    v = study.values([k])[0]
    np.testing.assert_array_equal(v, [table[n][k].as_py() for n in names])
    sc = study.scenario
    plant = jaxmb_with(sc.plant, dict(zip(names, v, strict=True)))
    e0 = np.array([v[names.index(f"initial_error.{c}")] for c in ("phi", "theta", "delta")])
    push = v[names.index("disturbance.scale")] * 25.0
    assert plant.body("link1").mass == pytest.approx(v[names.index("body.link1.mass")])
    from jaxmb.simulation import Disturbance, WindowedWrench

    dist = Disturbance(
        wrenches={"F3": WindowedWrench([0, 0, 0, 0, -push, 0], 10.0, 11.0)}, jump_times=(10.0, 11.0)
    )
    o = study.options
    tr = simulate(
        plant, ctrl, sc.reference, sc.reference(0.0) + e0, jnp.zeros(3), study.ts,
        disturbance=dist, solver=o.method, rtol=o.rtol, atol=o.atol,
    )  # fmt: skip
    rmse = np.sqrt(np.mean(np.asarray(tr.e) ** 2, axis=0))
    for i, c in enumerate(("phi", "theta", "delta")):
        assert table[f"rmse_{c}"][k].as_py() == pytest.approx(rmse[i], rel=1e-7)
        peak = np.abs(np.asarray(tr.u)[:, i]).max()
        assert table[f"peak_effort_{c}"][k].as_py() == pytest.approx(peak, rel=1e-7)
    assert not any(table["failed"].to_pylist())


def jaxmb_with(plant, values):
    from jaxmb.control.sampling import with_leaves

    return with_leaves(plant, {n: x for n, x in values.items() if n.startswith("body.")})


def test_failed_solves_keep_their_row_and_parameters(arm):
    """With the shipped study's own solver (Rodas4; the other tests here use Tsit5, which
    compiles in half the time)."""
    cfg = study_config.load_config(small_arm_config(arm["tmp"], method="rodas4"))
    assert cfg["solver"]["method"] == "rodas4"
    # Rodas4 takes 29 to 72 steps on these 4 samples (measured): 40 fails 3 of them
    cfg["solver"]["max_steps"] = 40
    study, ctrl, _, _, lanes, desc = study_config.build_study(cfg, samples=4, chunk=2)
    out = arm["tmp"] / "failing"
    table = run_study(study, ctrl, out, samples=4, chunk=2, description=desc, progress=False,
                      lanes=lanes)  # fmt: skip
    failed = np.asarray(table["failed"])
    assert table.num_rows == 4 and failed.any() and not failed.all(), failed
    # parameters present for every row; figures null where failed (not NaN that could pass
    # for data), present where not
    np.testing.assert_array_equal(
        np.asarray(table["body.link1.mass"]), study.values(np.arange(4))[:, 0]
    )
    for c in ("rmse_theta", "bound_held", "dbar_delta"):
        assert np.asarray(table[c].is_null()).tolist() == failed.tolist()
    assert np.isfinite(np.asarray(table["rmse_theta"].drop_null(), float)).all()


def test_a_study_in_the_same_folder_must_be_the_same_study(arm, reference_run):
    out, _ = reference_run
    desc = {**arm["desc"], "study": {**arm["desc"]["study"], "seed": 99}}
    with pytest.raises(ValueError, match="different study"):
        run_study(arm["study"], arm["controller"], out, samples=6, chunk=4, description=desc,
                  progress=False, lanes=arm["lanes"])  # fmt: skip


def _compare(a, b, *, exact: bool):
    """Same rows, bitwise within one device layout. Across layouts (another device count, two
    processes) the figures to 1e-9 of themselves and every count, flag and parameter exactly:
    XLA compiles each mesh's program on its own and may order a batched reduction differently,
    which these Tsit5 solves happen not to show and the shipped study's Rodas4 solves do
    (measured: max error 2.7e-10, dbar 3e-15 relative, far inside the solver's rtol 1e-6)."""
    assert a.column_names == b.column_names and a.num_rows == b.num_rows
    for c in a.column_names:
        x, y = a[c].to_numpy(zero_copy_only=False), b[c].to_numpy(zero_copy_only=False)
        if exact or x.dtype.kind != "f":
            np.testing.assert_array_equal(x, y, err_msg=c)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=0, err_msg=c)


def _cli(args, env=None, **kw):
    # not the parent's XLA_FLAGS: an in-process `main` of an earlier test (jaxmb tune) set its
    # device count there, and a child must split its CPU as its own --cpu-devices says
    inherited = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    e = {**inherited, "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [PYTHON, "-c", "from jaxmb.cli import main; raise SystemExit(main())", *args]
    return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def test_same_results_over_chunks_devices_and_processes(arm, reference_run):
    """4 host devices in one process, chunks of 8; and two processes of 2 devices each under
    jax.distributed (gloo collectives on CPU), chunks of 4."""
    _, ref = reference_run
    cfg = small_arm_config(arm["tmp"])
    four = arm["tmp"] / "four_devices"
    p = _cli(["montecarlo", str(cfg), "--out", str(four), "--samples",
              "6", "--chunk", "8", "--cpu-devices", "4", "--quiet", "--no-plots"])  # fmt: skip
    log = p.communicate(timeout=600)[0].decode()
    assert p.returncode == 0, log
    assert "over 4 device(s), 1 process(es)" in log
    _compare(pq.read_table(four / "results.parquet"), ref, exact=False)

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    two = arm["tmp"] / "two_processes"
    procs = [
        _cli(
            [
                "montecarlo",
                str(cfg),
                "--out",
                str(two),
                "--samples",
                "6",
                "--chunk",
                "4",
                "--cpu-devices",
                "2",
                "--quiet",
                "--no-plots",
                "--coordinator",
                f"localhost:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ]
        )  # fmt: skip
        for i in range(2)
    ]
    logs = [q.communicate(timeout=600)[0].decode() for q in procs]
    assert all(q.returncode == 0 for q in procs), logs
    assert "over 4 device(s), 2 process(es)" in logs[0]
    _compare(pq.read_table(two / "results.parquet"), ref, exact=False)


def test_a_killed_study_resumes_to_the_same_file(arm, reference_run, capsys):
    """SIGKILL once the first of three chunks is on disk; the same command again finishes
    it. Same device layout as the reference (one device, 2 lanes; the chunk size does not
    matter), so the file is bitwise equal. A chunk truncated on disk before the resume is
    recomputed, and the resume says so."""
    _, ref = reference_run
    cfg = small_arm_config(arm["tmp"])
    out = arm["tmp"] / "killed"
    args = ["montecarlo", str(cfg), "--out", str(out), "--samples", "6", "--chunk", "2",
            "--cpu-devices", "1", "--no-plots"]  # fmt: skip
    p = _cli(args)
    deadline = time.time() + 600
    while not list((out / "chunks").glob("part-*.parquet")):
        assert p.poll() is None, p.communicate()[0].decode()
        assert time.time() < deadline
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stdout.close()
    assert not (out / "results.parquet").exists()
    parts = sorted((out / "chunks").glob("part-*.parquet"))
    assert 1 <= len(parts) < 3
    parts[0].write_bytes(parts[0].read_bytes()[:100])  # a disk that lost its tail
    from jaxmb.cli import main

    capsys.readouterr()
    assert main([*args, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"{parts[0]}: corrupted" in err and "recomputing it" in err, err
    final = pq.read_table(out / "results.parquet")
    _compare(final, ref, exact=True)
    # the report of the resumed study
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) <= set(MONTECARLO)  # docs/reference.md
    assert not unlisted(out, MONTECARLO_FILES)
    assert summary["samples"] == 6 and summary["failed"] == 0
    assert 0.0 <= summary["fraction_within_bound"] <= 1.0
    assert set(summary["fraction_kappa_exceeds_dbar"]) == {"phi", "theta", "delta"}
    assert len(summary["worst"]) == 6
    assert summary["figures"]["rmse_theta"]["max"] == pytest.approx(
        np.nanmax(np.asarray(final["rmse_theta"], float))
    )


def _rewrite(path: Path, edit, metadata=None):
    """Rewrite chunk ``path`` with ``edit(table)``, its metadata ``metadata(table)`` or kept."""
    table = pq.read_table(path)
    new = edit(table)
    meta = table.schema.metadata if metadata is None else metadata(new)
    pq.write_table(new.replace_schema_metadata(meta), path)


def test_a_resume_checks_every_chunk_against_the_configuration(arm, reference_run, tmp_path):
    """No study mixes rows: chunks of another configuration, or holding parameter values the
    configuration does not draw, are refused before anything compiles; a chunk whose columns
    no longer match its own hash is dropped and recomputed (issue 29)."""
    import shutil

    from jaxmb.control import montecarlo as mc

    ref, _ = reference_run
    study, ctrl = arm["study"], arm["controller"]
    kw = dict(samples=6, chunk=4, progress=False, lanes=arm["lanes"])

    def fresh(name):
        out = tmp_path / name
        shutil.copytree(ref, out, ignore=shutil.ignore_patterns("results.parquet", "*.png"))
        return out

    # study.json deleted, then the study run again with another seed: the chunks remember
    out = fresh("reseeded")
    (out / "study.json").unlink()
    other = {**arm["desc"], "study": {**arm["desc"]["study"], "seed": 99}}
    with pytest.raises(ValueError, match=r"another configuration .* remove .* to start afresh"):
        run_study(study, ctrl, out, description=other, **kw)
    assert sorted(p.name for p in (out / "chunks").iterdir()) == sorted(
        p.name for p in (ref / "chunks").iterdir()
    )  # nothing removed

    # the configuration's hash intact, but values it does not draw (hashed consistently)
    out = fresh("tampered")
    first = sorted((out / "chunks").glob("part-*.parquet"))[0]
    name = study.parameter_names[0]

    def bump(t):
        i = t.column_names.index(name)
        return t.set_column(i, name, pa.array(np.asarray(t[name]) * 1.5))

    def rehash(t):
        m = dict(t.schema.metadata)
        m[mc.VALUES_KEY] = mc.values_hash(*mc._chunk_values(t, study.parameter_names)).encode()
        return m

    _rewrite(first, bump, rehash)
    with pytest.raises(
        ValueError, match=r"not the values this configuration draws for samples 0\.\.3"
    ):
        run_study(study, ctrl, out, description=arm["desc"], **kw)

    # a column edited behind its hash's back: corrupted, dropped with a message, recomputed
    out = fresh("edited")
    first = sorted((out / "chunks").glob("part-*.parquet"))[0]
    _rewrite(first, bump)
    said = []
    manifest = {"study": arm["desc"], "parameters": list(study.parameter_names),
                "samples": 6, "lanes": arm["lanes"]}  # fmt: skip
    done = mc.check_chunks(out, study, manifest, log=said.append)
    assert done.tolist() == [4, 5] and not first.exists()
    assert len(said) == 1 and f"{first}: its parameter columns do not match its own hash" in said[0]


def test_report_plots(arm, reference_run):
    from jaxmb.control.mc_report import write_mc_report

    out, table = reference_run
    assert set(write_mc_report(out, table, arm["study"])) <= set(MONTECARLO)
    assert not unlisted(out, MONTECARLO_FILES)  # docs/reference.md
    for f in ("error_distributions.png", "errors_vs_bounds.png", "worst_cases.png"):
        assert (out / f).stat().st_size > 10_000


def test_chunk_runner_refuses_a_ragged_chunk(arm):
    run, granule = chunk_runner(arm["study"], arm["controller"], lanes=2)
    assert granule == 2 * len(jax.devices())
    with pytest.raises(ValueError, match="not a multiple of 2 lanes"):
        run(np.arange(granule + 1))


@pytest.mark.parametrize(
    "edit, match",
    [
        ("[study]\nscenario = 'boat'\n", "scenario: expected one of"),
        ("[study]\nscenario = 'section_iv'\nsamplez = 3\n", r"unknown key\(s\) \['samplez'\]"),
        (
            "[study]\nscenario = 'section_iv'\n[[parameter]]\nname = 'body.link9.mass'\n",
            "no body 'link9'",
        ),
        (
            "[study]\nscenario = 'section_iv'\n[[parameter]]\nname = 'initial_error.psi'\n",
            "unknown scenario parameter",
        ),
        ("[study]\nscenario = 'section_iv'\n[controller]\nk_v = 3\n", "k_v"),
        ("[study]\nscenario = 'section_iv'\nseed = 'x'\n", r"\[study\] seed: expected an integer"),
        ("[study]\nscenario = 'section_iv'\n[solver]\nrtol = -1\n", "solver.rtol: must be"),
        ("[study]\nscenario = 'section_iv'\n[limits]\ntorque = [1, -1, 1]\n", "limits.torque"),
        ("[study\nscenario = 1", "not valid TOML"),
    ],
)
def test_configuration_errors_name_the_key(tmp_path, edit, match):
    path = tmp_path / "bad.toml"
    path.write_text(edit)
    with pytest.raises(ValueError, match=match):
        study_config.build_study(study_config.load_config(path))
