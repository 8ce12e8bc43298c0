"""Several experiments of one hydraulic machine fitted together (`identification.campaign`):
the logs joined on one time axis replay as each log alone, each under its own payload; stage 1
on a campaign whose known payload pins the booms; logs that cannot be one campaign refused by
name before anything compiles. The end-to-end campaign identification is
`test_identify_main.py`'s crane test."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import true_stage1_vector

from jaxmb import cli
from jaxmb.identification import mechanics as mech
from jaxmb.identification import output_error as oe
from jaxmb.identification.campaign import GAP, Campaign, payload_body
from jaxmb.identification.hydraulic_route import log_columns
from jaxmb.io.logs import read_log, write_log
from jaxmb.io.machine import load_machine

CRANE = Path(__file__).resolve().parents[1] / "data/synthetic_crane"
LOADED = CRANE / "synthetic_crane_payload_excitation.parquet"  # 40 s, 60 kg it does not name
KNOWN = CRANE / "synthetic_crane_excitation.parquet"  # 25 s, its sidecar names 150 kg


@pytest.fixture(scope="module")
def crane():
    machine = load_machine("crane")
    return machine, machine.read_log(LOADED), machine.read_log(KNOWN)


def _short(log, t0, seconds):
    """``log``'s columns from ``t0`` for ``seconds``, on its own time."""
    cols = log_columns(log)
    keep = (cols["t"] >= t0 - 1e-9) & (cols["t"] <= t0 + seconds + 1e-9)
    return {k: v[keep] for k, v in cols.items()}


def test_joined_logs_replay_as_each_log_alone_under_its_payload(crane):
    """A campaign's segments (two logs laid end to end, the second naming 150 kg, the first's
    payload the plant's own: 60 kg, 5 cm off the file's centre, as an identified load may be)
    simulate exactly as each log's own segments do on its own time axis with the plant
    carrying that log's payload, the named one as the file's body at 150 kg: the join moves
    no sample and applies each log's payload to its segments only."""
    machine, loaded, known = crane
    plant = machine.with_payload(60.0, com=(0.05, 0.02, 0.0))
    a, b = _short(loaded, 5.0, 0.4), _short(known, 7.0, 0.4)
    camp = Campaign.of(("a", "b"), (a, b), (None, 150.0), payload_body(machine.plant))
    # the second log starts GAP after the first ends
    assert camp.columns[1]["t"][0] == pytest.approx(camp.columns[0]["t"][-1] + GAP)
    kw = dict(segment_time=0.1, stride=10)
    joined = camp.cut(plant, lambda c: oe.make_segments(plant, c, **kw))
    np.testing.assert_array_equal(np.isnan(np.asarray(joined.payload[:, 0])), [1] * 4 + [0] * 4)
    y = np.asarray(oe.simulate_segments_compiled(oe.strong_types(plant), joined, 1e-3))
    alone_a = oe.make_segments(plant, a, **kw)
    alone_b = oe.make_segments(machine.with_payload(150.0), b, **kw)
    ya = np.asarray(oe.simulate_segments_compiled(oe.strong_types(plant), alone_a, 1e-3))
    plant_b = oe.strong_types(machine.with_payload(150.0))
    yb = np.asarray(oe.simulate_segments_compiled(plant_b, alone_b, 1e-3))
    np.testing.assert_allclose(y[:4], ya, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(y[4:], yb, rtol=1e-12, atol=1e-9)
    # and the payload matters: joined without their payloads marked, the second log's
    # segments run under the plant's load and miss its pressures by more than a bar
    wrong = oe.join_segments([alone_a, alone_b], camp.commands(plant))
    yw = np.asarray(oe.simulate_segments_compiled(oe.strong_types(plant), wrong, 1e-3))
    assert np.max(np.abs(yw[4:, :, 2:] - yb[:, :, 2:])) > 1e5


def test_joined_commands_hold_each_log_until_it_starts(crane):
    """The joined command table reads each log's own samples, and before a later log starts
    its first sample (as a single log's table holds it before its first): a spool's start
    state and a delayed command read that log alone."""
    machine, loaded, known = crane
    a, b = _short(loaded, 5.0, 0.3), _short(known, 7.0, 0.3)
    camp = Campaign.of(("a", "b"), (a, b), (None, 150.0), payload_body(machine.plant))
    table = camp.commands(machine.plant)
    for cols in camp.columns:
        t = cols["t"][::37]
        got = np.stack([np.asarray(table(ti)) for ti in t])
        want = np.stack([cols[c][::37] for c in table.names], axis=1)
        np.testing.assert_array_equal(got, want)
    t_b = camp.columns[1]["t"][0]
    first = np.array([camp.columns[1][c][0] for c in table.names])
    for dt in (0.01, 0.2, 0.45):
        np.testing.assert_array_equal(np.asarray(table(t_b - dt)), first)


def test_a_known_payload_in_one_log_pins_the_booms(crane):
    """Stage 1 on the crane's loaded log (60 kg, not named) and its excitation log (150 kg,
    named): the known load separates the booms from the unknown one, so the payload's std
    shrinks from 1.8 kg (the loaded log alone) to below 0.2 kg, and the payload lies within
    0.5 % and 3 std of the truth; every base parameter within 4 std of the true model's."""
    machine, loaded, known = crane
    alone = mech.identify_mechanics(machine, loaded)
    both = mech.identify_mechanics(machine, [loaded, known], payload_known=[None, 150.0])
    assert both.payload_mass_std < 0.2 < alone.payload_mass_std / 5
    assert both.payload_mass == pytest.approx(60.0, rel=0.005)
    assert abs(both.payload_mass - 60.0) < 3 * both.payload_mass_std
    truth = json.loads((CRANE / "synthetic_crane_truth.json").read_text())["parameters"]
    true = true_stage1_vector(both, machine.with_payload(60.0).model, truth)
    z = (both.base_fit.theta - both.base.project(true)) / both.base_fit.std
    assert np.all(np.abs(z) < 4.0), dict(zip(both.base.expressions(3), np.round(z, 2), strict=True))
    # one noise level per joint and log
    assert both.base_fit.row_sigma.shape == (2 * machine.plant.model.n,)


def _variant(tmp_path, name, *, drop=None, rate=1, model=None):
    """The known-payload log's first 6 s rewritten: a column dropped, every ``rate``-th sample,
    or its sidecar naming another machine."""
    log = read_log(KNOWN)
    n = 6001
    signals = {k: v[:n:rate] for k, v in log.signals.items() if k != drop}
    meta = dict(log.meta)
    if model is not None:
        meta["model"] = model
    path = tmp_path / f"{name}.parquet"
    write_log(path, log.t[:n:rate], signals, meta=meta)
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("model", r"fit logs synthetic_crane_payload_excitation and other: their sidecars name "
                  r"different machines \('lift_tilt_crane', 'knuckle'\)"),
        ("columns", r"fit logs synthetic_crane_payload_excitation and other: different columns "
                    r"\(\['x_lift'\] in one only\)"),
        ("rate", r"fit logs synthetic_crane_payload_excitation and other: sampled at 1000 Hz and "
                 r"500 Hz; a campaign's logs share one sample rate"),
        ("window", r"--window: selects a span of one fit log; with several, cut each log"),
    ],
)  # fmt: skip
def test_logs_that_are_not_one_campaign_are_refused_by_name(tmp_path, kind, message):
    """Two fit logs of different machines, with other columns or another sample rate, or a
    --window over
    several logs: refused by name before anything compiles, nothing written."""
    other = _variant(tmp_path, "other", model="knuckle" if kind == "model" else None,
                     rate=2 if kind == "rate" else 1,
                     drop="x_lift" if kind == "columns" else None)  # fmt: skip
    out = tmp_path / "out"
    argv = ["identify", str(LOADED), str(other), "--model", "crane", "--out", str(out), "--quiet"]
    if kind == "window":
        argv += ["--window", "0,5"]
    with pytest.raises(SystemExit, match=message):
        cli.main(argv)
    assert not out.exists()


def test_long_refit_segments_of_a_campaign(crane):
    """The long refit's segments of a campaign (`long_refit.long_sets`): as long as the
    longest log's (10 s of the 40 s log), each log holding as many as fit in it (4 and 2),
    each starting on its own log's samples, chained as pieces of 1 s, and carrying its log's
    payload: the 150 kg the second names, as the file's payload body."""
    from jaxmb.identification.long_refit import long_sets

    machine, loaded, known = crane
    plant = machine.with_payload(60.0)
    a, b = log_columns(loaded), log_columns(known)
    camp = Campaign.of(("a", "b"), (a, b), (None, 150.0), payload_body(machine.plant))
    seg, pieces, heads, m = long_sets(plant, camp, np.ones(6), None, None)
    assert seg.ts.shape[0] == 6 and m == 10 and pieces.ts.shape[0] == heads.ts.shape[0] == 60
    starts = np.asarray(seg.ts[:, 0])
    t_b = camp.columns[1]["t"]
    np.testing.assert_allclose(starts, [0, 10, 20, 30, t_b[0], t_b[0] + 10], atol=1e-9)
    np.testing.assert_allclose(np.asarray(seg.ts[:, -1] - seg.ts[:, 0]), 10.0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(pieces.ts[::m, 0]), starts, atol=1e-9)
    for s in (seg, pieces, heads):
        mass = np.asarray(s.payload[:, 0])
        k = mass.size * 4 // 6  # the first log's share
        assert np.all(np.isnan(mass[:k])) and np.all(mass[k:] == 150.0)
        body = np.asarray(s.payload[k:, 1:])
        np.testing.assert_array_equal(
            body, np.broadcast_to(payload_body(machine.plant), body.shape)
        )
