"""The reference (docs/reference.md) is generated from the code's own tables and cannot drift:
it is what `scripts/make_reference.py` renders now, every command and option and every
machine-file table is on it (the loader refuses any key its tables lack), and every key of the
hydraulic summary table has a meaning (the end-to-end identification tests
hold each written summary.json to that table)."""

import argparse
import importlib.util
from pathlib import Path

from jaxmb.cli import build_parser
from jaxmb.identification.summary_keys import HYDRAULIC, RIGID
from jaxmb.io.machine_keys import CYLINDER, TABLES, VALVE

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_reference", ROOT / "scripts" / "make_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_the_code_s():
    page = (ROOT / "docs" / "reference.md").read_text()
    assert page == _generator().render(), (
        "docs/reference.md is stale: python scripts/make_reference.py"
    )


def test_every_option_and_summary_key_is_on_it():
    page = (ROOT / "docs" / "reference.md").read_text()
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    # the parser leaves out a command whose module fails to load: the page must not
    assert {"identify", "montecarlo", "simulate", "state", "tune"} <= set(commands.choices)
    for name, sub in commands.choices.items():
        assert f"### `jaxmb {name}`" in page
        for a in sub._actions:
            for flag in a.option_strings:
                assert flag in ("-h", "--help") or f"`{flag}`" in page, (name, flag)
    for table, keys in {**TABLES, "cylinders.<name>": CYLINDER, "valves.<name>": VALVE}.items():
        for key, meaning in (keys or {}).items():
            assert len(meaning) > 5, (table, key)
        assert keys is None or f"### `[{table}]`" in page, table
    for key, meaning in (*HYDRAULIC.items(), *RIGID.items()):
        assert len(meaning) > 10 and f"| `{key}` |" in page, key
