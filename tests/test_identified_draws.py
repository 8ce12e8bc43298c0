"""Studies over what identification left uncertain (issue 80 point 2): draws from the joint
covariance an identification wrote (`sampling.identified`, ``[identified]`` in a study's
configuration), correlations included, positive by construction; the configuration refused by
name where it cannot hold. A real identification's files are drawn from in
`test_mobile_identified.py`."""

import numpy as np
import pytest
import scipy.linalg

from jaxmb.control import study_config
from jaxmb.control.sampling import identified
from jaxmb.io import params_file
from jaxmb.io.covariance_file import read_covariance, write_covariance
from jaxmb.io.machine import load_machine

NAMES = ["valve.lift.c_pa", "valve.lift.c_an", "cylinder.lift.beta", "friction.lift.F_c",
         "body.payload.com_x"]  # fmt: skip


def _covariance():
    """Strongly correlated, as an output-error fit leaves them: the edges with the bulk
    modulus; four log-space parameters and a linear one (m)."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 5)) + 2.0 * np.eye(5)
    A[:, 2] += 1.5 * A[:, 0]
    C = A @ A.T
    d = np.array([0.01, 0.012, 0.02, 0.05, 0.004])
    return C / np.outer(np.sqrt(np.diag(C)), np.sqrt(np.diag(C))) * np.outer(d, d)


def test_draws_follow_the_identified_covariance(tmp_path):
    """10^4 draws (every std inflated 2x): the covariance of their log (or value, for the
    linear one) is 4x the file's within sampling error, every correlation within 0.03, and
    every log-space draw positive."""
    C = _covariance()
    values = [3.9e-8, 3.3e-8, 8.0e8, 290.0, 0.01]
    path = write_covariance(tmp_path / "c.json", NAMES, values, C,
                            ["log"] * 4 + ["linear"])  # fmt: skip
    dist = identified(read_covariance(path), inflate=2.0)
    assert [p.kind for p in dist.parameters] == ["lognormal"] * 4 + ["normal"]
    N = 10_000
    x = dist.sample(values, seed=0, indices=np.arange(N))
    assert np.all(x[:, :4] > 0)
    u = np.concatenate([np.log(x[:, :4] / values[:4]), x[:, 4:] - values[4]], axis=1)
    S = 4.0 * C
    got = np.cov(u, rowvar=False)
    se = np.sqrt((np.outer(np.diag(S), np.diag(S)) + S**2) / N)  # of a sample covariance
    assert np.all(np.abs(got - S) < 4 * se), (got - S) / se
    R = C / np.outer(np.sqrt(np.diag(C)), np.sqrt(np.diag(C)))
    assert np.max(np.abs(R - np.eye(5))) > 0.5  # strongly correlated, and reproduced
    np.testing.assert_allclose(np.corrcoef(u, rowvar=False), R, atol=0.03)


def _identified_crane(tmp_path, shift=1.0, digest=None):
    """A parameter file and its covariance for the crane, as identification writes them
    (its hydraulics 1 % off the file's); ``shift`` moves the covariance's values away;
    ``digest``: the machine files it says it was identified on (default the crane's)."""
    crane = load_machine("crane")
    hyd = {}
    for n in NAMES[:4]:
        part, a, field = n.split(".")
        i = crane.plant.actuator_names.index(a)
        obj = getattr(crane.plant.actuators[i], part)
        hyd[n] = 1.01 * float(getattr(obj, field))
    # with a transducer's offset (Pa), which a closed loop never reads: not drawn
    write_covariance(tmp_path / "covariance.json",
                     NAMES[:4] + ["mechanics.T.m", "sensor.lift.p_a"],
                     [hyd[n] * shift for n in NAMES[:4]] + [158.0, 2e4],
                     scipy.linalg.block_diag(_covariance(), [[1e6]]),
                     ["log"] * 4 + ["linear"] * 2)  # fmt: skip
    params_file.write_params(tmp_path / "params.json", model_name="crane", method="output error",
                             hydraulics=hyd, covariance="covariance.json",
                             source={params_file.DIGEST: digest or crane.digest()})  # fmt: skip
    return tmp_path / "params.json"


def _config(tmp_path, identified_table, study=""):
    cfg = tmp_path / "study.toml"
    cfg.write_text(f'[study]\nscenario = "crane"\nparams = "params.json"\n{study}\n'
                   f"{identified_table}")  # fmt: skip
    return cfg


def test_a_crane_study_draws_the_identified_parameters(tmp_path):
    """``[identified]`` on the crane with its identified parameter file: the stage-2
    parameters drawn (stage 1's bodies and the transducer's offset held), a hand-set one replacing its identified draw,
    their correlations the file's, and the covariance's hash in the study's description."""
    _identified_crane(tmp_path)
    cfg = _config(tmp_path, "[identified]\ninflate = 2.0\n\n[[parameter]]\n"
                  'name = "friction.lift.F_c"\nspread = 0.2\n')  # fmt: skip
    study, _, *_, desc = study_config.build_study(study_config.load_config(cfg))
    dist = study.distribution
    assert dist.names == ("friction.lift.F_c", *NAMES[:3])
    assert [p.kind for p in dist.parameters] == ["uniform", "lognormal", "lognormal", "lognormal"]
    R = np.asarray(dist.correlation)
    C = _covariance()[:3, :3]
    d = np.sqrt(np.diag(C))
    np.testing.assert_allclose(R[1:, 1:], C / np.outer(d, d), rtol=1e-12)
    np.testing.assert_array_equal(R[0, 1:], 0.0)
    np.testing.assert_allclose([p.spread for p in dist.parameters[1:]], 2 * d, rtol=1e-12)
    assert len(desc["study"]["covariance_sha256"]) == 64


@pytest.mark.parametrize(
    "table, study, message",
    [
        ("[identified]\ninflate = 0.0\n", "", r"\[identified\] inflate: expected a number > 0"),
        ('[identified]\nexclude = ["valve.tilt.c_pa"]\n', "",
         r"\[identified\] exclude: \['valve.tilt.c_pa'\] are not in"),
        ("[identified]\ninflat = 2.0\n", "", r"unknown key\(s\) \['inflat'\]"),
    ],
)  # fmt: skip
def test_bad_identified_tables_are_refused_by_name(tmp_path, table, study, message):
    _identified_crane(tmp_path)
    with pytest.raises(ValueError, match=message):
        study_config.build_study(study_config.load_config(_config(tmp_path, table, study)))


def test_identified_needs_the_parameter_file_it_comes_from(tmp_path):
    cfg = tmp_path / "study.toml"
    cfg.write_text('[study]\nscenario = "crane"\n\n[identified]\ninflate = 2.0\n')
    with pytest.raises(ValueError, match=r"\[identified\]: .*name its parameter file in \[study\] "
                       "params"):  # fmt: skip
        study_config.load_config(cfg)


def test_a_covariance_of_another_identification_is_refused(tmp_path):
    """The covariance's values not the parameter file's (another identification's): refused,
    naming the parameter and both values, before anything runs."""
    _identified_crane(tmp_path, shift=1.02)
    with pytest.raises(ValueError, match=r"\[identified\] valve.lift.c_pa: the study's plant "
                       r"holds .*, the covariance file .*: the parameter file and its covariance "
                       "are not one identification"):  # fmt: skip
        study_config.build_study(
            study_config.load_config(_config(tmp_path, "[identified]\ninflate = 1.0\n"))
        )


def test_a_parameter_file_of_other_machine_files_is_refused(tmp_path):
    """A parameter file whose machine files (the sha256 identification recorded) are not the
    study's: refused before anything runs, as ``simulate --params`` refuses it."""
    _identified_crane(tmp_path, digest="0" * 64)
    with pytest.raises(ValueError, match=r"\[study\] params: --params: .*params.json was "
                       r"identified on other machine files than these \(its "
                       r"source.machine_files_sha256 000000000000\.\.\."):  # fmt: skip
        study_config.build_study(
            study_config.load_config(_config(tmp_path, "[identified]\ninflate = 1.0\n"))
        )
