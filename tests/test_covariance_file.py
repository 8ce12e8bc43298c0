"""The identified parameters' joint covariance as a file (`jaxmb.io.covariance_file`): written
and read back as it was, each std from its parametrisation, and a file that cannot be a
covariance refused by name. The files identification writes are checked against its tables
in `test_identify_main.py`."""

import json

import numpy as np
import pytest

from jaxmb.io.covariance_file import read_covariance, write_covariance


def _matrix():
    A = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 0.5]])
    return A @ A.T * 1e-4


def test_round_trip_and_stds(tmp_path):
    C = _matrix()
    path = write_covariance(
        tmp_path / "c.json", ["valve.a.c_pa", "cylinder.a.beta", "mechanics.L.m"],
        [2e-8, 8e8, 140.0], C, ["log", "log", "linear"], undetermined=["mechanics.L.m"],
        note="n",
    )  # fmt: skip
    got = read_covariance(path)
    assert got["names"] == ["valve.a.c_pa", "cylinder.a.beta", "mechanics.L.m"]
    np.testing.assert_array_equal(got["covariance"], C)
    s = np.sqrt(np.diag(C))
    np.testing.assert_allclose(got["std"][:2], [2e-8 * s[0], 8e8 * s[1]], rtol=1e-15)
    assert got["undetermined"] == ["mechanics.L.m"] and got["note"] == "n"
    assert got["std"][2] == np.inf  # undetermined: as parameters.csv says


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["covariance"][0].__setitem__(1, 1.0), "'covariance' is not symmetric"),
        (lambda d: d["covariance"][2].__setitem__(2, -1.0), "'covariance' is not positive semidefinite"),
        (lambda d: d["covariance"].pop(), r"'covariance' must be a finite 3 x 3 matrix .* got shape \(2, 3\)"),
        (lambda d: d["parameters"][1].__setitem__("name", "a"), r"parameter\(s\) \['a'\] given twice"),
        (lambda d: d["parameters"][0].__setitem__("parametrisation", "exp"),
         r"parameter\(s\) \['a'\]: parametrisation must be one of \('log', 'linear'\)"),
        (lambda d: d.__setitem__("undetermined", ["z"]), r"undetermined \['z'\] are not parameters"),
        (lambda d: d.__setitem__("format", "x"), "not a jaxmb covariance file"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_covariance_is_refused_by_name(tmp_path, change, message):
    path = write_covariance(tmp_path / "c.json", ["a", "b", "c"], [1.0, 2.0, 3.0], _matrix(),
                            ["log"] * 3)  # fmt: skip
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"covariance file {path}: {message}"):
        read_covariance(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="covariance file .*nowhere.json.*: no such file"):
        read_covariance(tmp_path / "nowhere.json")
