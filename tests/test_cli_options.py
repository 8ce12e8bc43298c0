"""Every option of every `jaxmb` command has its bad-input row (issue 29, point 5): a wrong
value, or the option given where it does not apply, refused before anything compiles with a
message that names the option and what was expected, and no output folder left behind.

`test_every_option_has_a_row` walks the parser, so that a new option fails it until its row
is written here."""

import argparse
import re

import pytest

from jaxmb.cli import build_parser, main

KR300 = "data/kr300/kr300_traj_A.parquet"
CRANE = "data/synthetic_crane/synthetic_crane_payload_excitation.parquet"
STUDY = "data/montecarlo_section_iv.toml"
CRANE_STUDY = "data/montecarlo_crane.toml"
KNUCKLE = "data/machines/knuckle_telescope.toml"

# flags that take no value and apply to every machine and route of their command: there is no
# wrong way to give them
NO_BAD_VALUE = {"-h", "--quiet", "--no-plots", "--json", "--full"}

# (command, option): (arguments after the command, the message's pattern)
ROWS = {
    ("state", "--q"): (["--q", "0.1,0.2"], r"--q: expected 3 finite numbers, got '0\.1,0\.2'"),
    ("state", "--qd"): (["--qd", "a,b,c"], r"--qd: expected 3 numbers separated by commas"),
    ("state", "--tau"): (["--tau", "1,2,nan"], r"--tau: expected 3 finite numbers"),
    ("simulate", "--machine"): (
        ["--machine", "nope"],
        r"--machine: expected arm, crane, rpr3-flexible or a machine file \(\.toml\), got 'nope'",
    ),
    ("simulate", "--out"): (["--out", "/dev/null/x"], r"--out: cannot write to '/dev/null/x'"),
    ("simulate", "--t-final"): (
        ["--t-final", "-1"],
        r"--t-final: expected a duration > 0 s, got -1",
    ),
    ("simulate", "--dt-save"): (
        ["--dt-save", "0"],
        r"--dt-save: expected 0 < dt <= 20 s \(the run.s duration\), got 0",
    ),
    ("simulate", "--commands"): (
        ["--commands", "c.csv"],
        r"--commands: not for arm; only for --machine crane or a machine file \(\.toml\)",
    ),
    ("simulate", "--clip-commands"): (
        ["--machine", "rpr3-flexible", "--clip-commands"],
        r"--clip-commands: not for rpr3-flexible; only for --machine crane",
    ),
    ("simulate", "--payload"): (
        ["--machine", "crane", "--payload", "-5"],
        r"--payload: expected a mass >= 0 kg, got -5\.0",
    ),
    ("simulate", "--Lambda"): (["--Lambda", "1,2"], r"--Lambda: expected 3 finite numbers"),
    ("simulate", "--K"): (
        ["--machine", "crane", "--K", "100"],
        r"--K: not for crane; only for --machine arm",
    ),
    ("simulate", "--kappa"): (["--kappa", "0"], r"--kappa: expected positive gains, got '0'"),
    ("simulate", "--eps"): (["--eps", "-1e-4"], r"--eps: expected positive gains, got '-1e-4'"),
    ("simulate", "--form"): (
        ["--machine", "crane", "--form", "passivity"],
        r"--form: not for crane; only for --machine arm",
    ),
    ("simulate", "--params"): (
        ["--machine", "rpr3-flexible", "--params", "p.json"],
        r"--params: not for rpr3-flexible; only for --machine arm or crane or a machine file",
    ),
    ("simulate", "--gains"): (["--gains", "MISSING.json"], r"gains file 'MISSING\.json': cannot"),
    ("simulate", "--omega"): (
        ["--omega", "30"],
        r"--omega: not for arm; only for --machine rpr3-flexible",
    ),
    ("identify", "log"): (["MISSING.parquet", "--model", "kr300"], r"no such log file"),
    ("identify", "--model"): (
        [KR300, "--model", "nope"],
        r"--model: expected one of \['arm', 'crane', 'kr300'\], a URDF \(\.urdf\) or a machine file",
    ),
    ("identify", "--out"): ([KR300, "--model", "kr300", "--out", "/dev/null/x"], r"--out: cannot"),
    ("identify", "--validate"): (
        [KR300, "--model", "kr300", "--validate", "MISSING.parquet"],
        r"no such log file 'MISSING\.parquet'",
    ),
    ("identify", "--method"): (
        [CRANE, "--model", "crane", "--method", "wls"],
        r"--method: only for the regressor route of a rigid robot; model 'crane' is a hydraulic",
    ),
    ("identify", "--cutoff"): (
        [KR300, "--model", "kr300", "--cutoff", "-5"],
        r"--cutoff: expected a frequency > 0 Hz, got -5\.0",
    ),
    ("identify", "--stride"): (
        [KR300, "--model", "kr300", "--stride", "0"],
        r"--stride: expected an integer >= 1, got 0",
    ),
    ("identify", "--prior-weight"): (
        [KR300, "--model", "kr300", "--prior-weight", "-1"],
        r"--prior-weight: expected a weight >= 0, got -1\.0",
    ),
    ("identify", "--coulomb-width"): (
        [KR300, "--model", "kr300", "--coulomb-width", "0"],
        r"--coulomb-width: expected a velocity > 0, got 0\.0",
    ),
    ("identify", "--terms"): (
        [KR300, "--model", "kr300", "--terms", "viscous,foo"],
        r"--terms: unknown term\(s\) \['foo'\]; expected some of \['armature', 'viscous', ",
    ),
    ("identify", "--window"): (
        [KR300, "--model", "kr300", "--window", "a,b"],
        r"--window: expected 2 numbers separated by commas, got 'a,b'",
    ),
    ("identify", "--gear-ratios"): (
        [KR300, "--model", "kr300", "--gear-ratios", "q1"],
        r"--gear-ratios: expected NAME=VALUE,\.\.\. got 'q1'",
    ),
    ("identify", "--torque-constants"): (
        [CRANE, "--model", "crane", "--torque-constants", "q1=1.2"],
        r"--gear-ratios/--torque-constants: only for the regressor route of a rigid robot",
    ),
    ("identify", "--leakage"): (
        [KR300, "--model", "kr300", "--leakage"],
        r"--leakage: only for a hydraulic machine's output error; model 'kr300' is identified",
    ),
    ("identify", "--segment-time"): (
        [CRANE, "--model", "crane", "--segment-time", "-1"],
        r"--segment-time: expected a duration > 0 s, got -1\.0",
    ),
    ("identify", "--resample"): (
        [KR300, "--model", "kr300", "--resample", "sometimes"],
        r"--resample: invalid choice: 'sometimes' \(choose from '?auto'?, '?off'?\)",
    ),
    ("identify", "--long-refit"): (
        [KR300, "--model", "kr300", "--long-refit", "no"],
        r"--long-refit: only for a hydraulic machine's output error",
    ),
    ("identify", "--mechanics"): (
        [KR300, "--model", "kr300", "--mechanics", "fixed"],
        r"--mechanics: only for a hydraulic machine's output error",
    ),
    ("identify", "--valve-effects"): (
        [KR300, "--model", "kr300", "--valve-effects", "held"],
        r"--valve-effects: only for a hydraulic machine's output error",
    ),
    ("identify", "--offsets"): (
        [KR300, "--model", "kr300", "--offsets", "fitted"],
        r"--offsets: only for a hydraulic machine's output error",
    ),
    ("identify", "--encoder-offsets"): (
        [KR300, "--model", "kr300", "--encoder-offsets", "none"],
        r"--encoder-offsets: only for a hydraulic machine's output error",
    ),
    ("identify", "--cpu-devices"): (
        [KR300, "--model", "kr300", "--cpu-devices", "0"],
        r"--cpu-devices: expected an integer >= 1, got 0",
    ),
    ("montecarlo", "config"): (["MISSING.toml"], r"config: no file 'MISSING\.toml'"),
    ("montecarlo", "--out"): ([STUDY, "--out", "/dev/null/x"], r"--out: cannot write to"),
    ("montecarlo", "--samples"): (
        [STUDY, "--samples", "-3"],
        r"--samples: expected an integer >= 1",
    ),
    ("montecarlo", "--chunk"): (
        [STUDY, "--chunk", "0"],
        r"--chunk: expected an integer >= 1, got 0",
    ),
    ("montecarlo", "--gains"): (
        [STUDY, "--gains", "MISSING.json"],
        r"gains file '.*MISSING\.json': cannot read JSON",
    ),
    ("montecarlo", "--cpu-devices"): (
        [STUDY, "--cpu-devices", "0"],
        r"montecarlo: --cpu-devices: expected an integer >= 1, got 0",
    ),
    ("montecarlo", "--coordinator"): (
        [STUDY, "--coordinator", "localhost:1234"],
        r"--coordinator needs --num-processes and --process-id",
    ),
    ("montecarlo", "--num-processes"): (
        [STUDY, "--num-processes", "2"],
        r"--num-processes, --process-id: only with --coordinator HOST:PORT",
    ),
    ("montecarlo", "--process-id"): (
        [STUDY, "--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "2"],
        r"--process-id: expected 0 <= id < --num-processes = 2, got 2",
    ),
    ("montecarlo", "--distributed"): (
        [STUDY, "--distributed"],
        r"--distributed: could not join the multi-process run",
    ),
    ("tune", "config"): (["MISSING.toml"], r"config: no file 'MISSING\.toml'"),
    ("tune", "--out"): ([STUDY, "--out", "/dev/null/x"], r"--out: cannot write to"),
    ("tune", "--steps"): ([STUDY, "--steps", "0"], r"\[tune\] steps: expected an integer >= 1"),
    ("tune", "--validation-samples"): (
        [STUDY, "--validation-samples", "0"],
        r"\[tune\] validation_samples: expected an integer >= 1, got 0",
    ),
    ("tune", "--cpu-devices"): (
        [STUDY, "--cpu-devices", "0"],
        r"tune: --cpu-devices: expected an integer >= 1, got 0",
    ),
}


def _options() -> set[tuple[str, str]]:
    """Every (command, option) of the parser: positionals by name, options by flag."""
    out = set()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                for a in sub._actions:
                    name = a.option_strings[0] if a.option_strings else a.dest
                    if name not in NO_BAD_VALUE:
                        out.add((command, name))
    return out


def test_every_option_has_a_row():
    """A new option of any command fails this until its bad-input row is in ROWS."""
    options = _options()
    assert sorted(options - ROWS.keys()) == [], "options without a bad-input row"
    assert sorted(ROWS.keys() - options) == [], "rows for options the CLI no longer has"


@pytest.mark.parametrize("command, option", sorted(ROWS))
def test_each_option_is_refused_by_name(tmp_path, capsys, command, option):
    """The row's arguments are refused with its message (argparse's own refusals, exit status
    2, print theirs on stderr), and no output folder is left."""
    args, message = ROWS[command, option]
    out = tmp_path / "out"
    argv = [command, *args]
    if command != "state":
        argv += ([] if "--out" in args else ["--out", str(out)]) + ["--quiet"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    assert code not in (0, None), f"{argv} ran"
    text = code if isinstance(code, str) else capsys.readouterr().err
    assert re.search(message, text), text
    assert not out.exists()


@pytest.mark.parametrize("command", ["simulate", "identify", "montecarlo", "tune"])
@pytest.mark.parametrize("inside", [False, True])
def test_an_out_that_is_a_file_is_named_as_one(tmp_path, command, inside):
    """An ``--out`` that is an existing file (or lies inside one) is refused as that, not as a
    folder that cannot be written, and the file is left as it was."""
    inputs = {"simulate": [], "identify": [KR300, "--model", "kr300"], "montecarlo": [STUDY],
              "tune": [STUDY]}[command]  # fmt: skip
    file = tmp_path / "results"
    file.write_text("kept")
    out = file / "run" if inside else file
    with pytest.raises(SystemExit) as info:
        main([command, *inputs, "--out", str(out), "--quiet"])
    said = f"'{file}' is a file, not a folder" if inside else "it is an existing file"
    assert f"--out: cannot write to '{out}': {said}" in str(info.value.code)
    assert file.read_text() == "kept"
