"""The reference (docs/reference.md) is generated from the code's own tables and cannot drift:
it is what `scripts/make_reference.py` renders now, every command and option and every
machine-file table is on it (the loader refuses any key its tables lack), and every output
file and summary.json key of every output table is on it, in its run's section, with a
meaning (the end-to-end tests hold each written folder and summary.json to those tables,
through `helpers.unlisted` for the files)."""

import argparse
import importlib.util
from pathlib import Path

from helpers import unlisted

from jaxmb.cli import build_parser
from jaxmb.control import summary_keys as control_keys
from jaxmb.identification import summary_keys as identification_keys
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


def _sections(page: str) -> dict[str, str]:
    """``{heading line: the text up to the next heading}`` of the page."""
    out, heading = {}, None
    for line in page.splitlines():
        if line.startswith("#"):
            heading = line
            out[heading] = ""
        elif heading is not None:
            out[heading] += line + "\n"
    return out


def test_every_output_file_and_summary_key_is_on_it():
    """Each run's files under its `### <run>` heading, its summary keys under `## summary.json
    of <run>`, each row with its meaning as the table has it; and every table of the two
    modules is one the page renders."""
    generator = _generator()
    sections = _sections((ROOT / "docs" / "reference.md").read_text())
    runs = generator.outputs()
    rendered = {id(table) for _, files, keys in runs for table in (files, keys)}
    for module in (identification_keys, control_keys):
        for name in module.__all__:
            assert id(getattr(module, name)) in rendered, f"{module.__name__}.{name}"
    for run, files, keys in runs:
        for heading, table in ((f"### {run}", files), (f"## `summary.json` of {run}", keys)):
            assert heading in sections, heading
            for name, meaning in table.items():
                assert len(meaning) > 10, (run, name)
                row = f"| `{name}` | {generator._cell(meaning)} |"
                assert row in sections[heading], (heading, name)
        assert "summary.json" in files, run


def test_unlisted_matches_names_placeholders_and_folders(tmp_path):
    """`helpers.unlisted`, which the end-to-end tests hold each output folder to: a name, a
    ``<placeholder>`` standing for any text but ``/``, and a folder ``name/`` with everything
    in it; anything else is named."""
    for path in ("summary.json", "chunks/part-000000000-000000002.parquet", "study.json",
                 "validation_tuned/chunks/part-1-2.parquet", "gains.json", "stray.txt",
                 "chunks/nested/part-1-2.parquet"):  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    files = {**control_keys.MONTECARLO_FILES, **control_keys.TUNE_FILES}
    assert unlisted(tmp_path, files) == ["chunks/nested/part-1-2.parquet", "stray.txt"]
    (tmp_path / "fit_a.b.png").write_text("")
    (tmp_path / "validation_b_nominal.png").write_text("")
    assert unlisted(tmp_path, identification_keys.HYDRAULIC_FILES) == [
        "chunks/nested/part-1-2.parquet",
        "chunks/part-000000000-000000002.parquet",
        "gains.json",
        "stray.txt",
        "study.json",
        "validation_tuned/chunks/part-1-2.parquet",
    ]
