"""A Griffe extension for the docs site (mkdocs.yml), for two things Griffe does not do alone.

A re-export `from .model import Model as Model` (the project's `__init__` convention, PEP 484's
explicit re-export) makes `Model` public where it is re-exported, so the API pages show it.

mkdocstrings finds `jaxmb.identification` and `jaxmb.control` where pyproject.toml's
`[tool.setuptools.package-dir]` installs them from. Griffe reads a package from one folder, so
it looks for them under `jaxmb/` and does not find them there: they live in the top-level
`identification/` and `control/` folders (DESIGN.md). When Griffe has loaded `jaxmb`, this
loads each mapped folder as a package of its own and attaches it to `jaxmb` under its installed
name, so `::: jaxmb.control` and the cross-references into it resolve as for any other
subpackage."""

import ast
import tomllib
from pathlib import Path
from typing import Any

import griffe


def _mapped(root: Path, top: str) -> dict[str, str]:
    """`{"identification": "identification", ...}`: the subpackages of `top` in other folders."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():  # an installed jaxmb: its subpackages are in place
        return {}
    setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    out = {}
    for name, folder in setuptools.get("package-dir", {}).items():
        parent, _, child = name.rpartition(".")
        if parent == top and "/" not in folder:
            out[child] = folder
    return out


class PackageDir(griffe.Extension):
    def on_module_members(self, *, node: Any, mod: griffe.Module, **kwargs: Any) -> None:
        del kwargs
        if not isinstance(node, ast.Module):  # found by importing it: no re-exports to read
            return
        for statement in node.body:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                for name in statement.names:
                    member = mod.members.get(name.name)
                    if name.asname == name.name and member is not None and member.is_alias:
                        member.public = True

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        del kwargs
        if pkg.name != "jaxmb" or pkg.parent is not None:
            return
        root = Path(pkg.filepath).parents[1]  # the clone jaxmb/__init__.py was found in
        for child, folder in _mapped(root, pkg.name).items():
            if child in pkg.members or not (root / folder / "__init__.py").is_file():
                continue
            sub = griffe.GriffeLoader(
                extensions=loader.extensions,
                search_paths=[root],
                docstring_parser=loader.docstring_parser,
                docstring_options=loader.docstring_options,
                lines_collection=loader.lines_collection,
                modules_collection=loader.modules_collection,
            ).load(folder, try_relative_path=False)
            # loaded as the top-level `folder`: move it under jaxmb, where it is installed
            del loader.modules_collection[folder]
            pkg.set_member(child, sub)
