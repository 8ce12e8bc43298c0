"""The one table of built-in machines (`jaxmb.models.catalog.CATALOG`, issue 30 point 3): every
workflow reaches a machine through it, by the machine's kind, and none names a machine itself.
Nothing here compiles."""

import argparse
import ast
from pathlib import Path

import pytest

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.commands import simulate as simulate_cmd
from jaxmb.control.kinds import KINDS, SCENARIOS
from jaxmb.identification.identify import resolve_model
from jaxmb.io.machine import BUILTIN, Machine, machine_path
from jaxmb.models.catalog import CATALOG, machine_file
from jaxmb.multibody.model import Model

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(CATALOG))
def test_each_workflow_takes_the_machines_the_catalog_says(name):
    """identify takes exactly the identifiable entries, by the route their model calls for;
    simulate exactly those with a closed loop; montecarlo and tune exactly those with a study,
    under the kind of their closed loop."""
    e = CATALOG[name]
    if e.identify:
        shown, model, route = resolve_model(name)
        assert shown == name
        assert route == ("hydraulic" if e.hydraulic else "rigid")
        assert isinstance(model, Machine if e.hydraulic else Model)
    else:
        with pytest.raises(ValueError, match="--model: expected one of"):
            resolve_model(name)
    if e.control is None:
        with pytest.raises(argparse.ArgumentTypeError, match="expected arm, crane"):
            simulate_cmd._machine_choice(name)
    else:
        assert simulate_cmd._machine_choice(name) == name
        assert e.control in simulate_cmd.RUNS
    if e.study is not None:
        kind, builtin = SCENARIOS[e.study]
        assert kind is KINDS[e.control]
        assert builtin == (name if e.hydraulic else None)
        assert kind.machine_file == e.hydraulic


def test_a_users_machine_file_is_the_built_in_cranes_kind():
    """A user's file and the bundled crane differ in their name only: the same closed loop, the
    same route, the same study kind ("machine" with its path against the crane's own name)."""
    assert set(BUILTIN) <= set(CATALOG)
    user = machine_file("my_machine.toml")
    for name in BUILTIN:
        e = CATALOG[name]
        assert (e.control, e.identify, e.hydraulic) == (user.control, user.identify, user.hydraulic)
        assert isinstance(e.load().plant, HydraulicPlant)
        assert machine_path(name).is_file()
        assert SCENARIOS[name][0] is SCENARIOS["machine"][0]
    assert (user.study, user.folder) == (None, "machine")
    assert set(SCENARIOS) == {e.study for e in CATALOG.values() if e.study} | {"machine"}


def test_every_catalog_machine_loads():
    for name, e in CATALOG.items():
        assert e.load() is not None, name
        assert e.folder and "/" not in e.folder, name


# string constants that are a machine's name but not a branch on it: the command line's default
# machine and its main job, and the arm's Section IV scenario builder (a function's name)
ALLOWED = {
    ("jaxmb/commands/simulate.py", "arm"),
    ("jaxmb/cli.py", "kr300"),
    ("control/scenario.py", "section_iv"),
}


def test_no_workflow_names_a_machine():
    """No string constant in a workflow or command equals a built-in machine's name or study:
    a new machine goes into the catalog, and no workflow changes."""
    names = set(CATALOG) | {e.study for e in CATALOG.values() if e.study}
    found = []
    for folder in ("control", "identification", "jaxmb/commands", "jaxmb/cli.py"):
        for path in (
            sorted((ROOT / folder).rglob("*.py")) if folder != "jaxmb/cli.py" else [ROOT / folder]
        ):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    if (rel, node.value) not in ALLOWED:
                        found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "\n".join(found)
    # and the check sees what it looks for
    tree = ast.parse('if machine == "crane":\n    pass\n')
    assert any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(tree))
