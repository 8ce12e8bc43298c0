"""The house's import order: every module's imports, the lazy ones inside functions included,
point at modules that exist, run down the layers (never up), never sideways between the two
workflows, and never in a circle. Read from the source (`ast`), so an import that only runs on
some command's path is checked too."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# bottom to top; a module imports from its own unit and from units of lower layers only
LAYERS = (
    ("jaxmb.compile_cache", "jaxmb.version"),  # no jaxmb imports
    ("jaxmb.multibody",),
    ("jaxmb.saved_programs",),  # traced programs on disk: over the checks' mode
    ("jaxmb.algorithms",),
    ("jaxmb.constraints",),
    ("jaxmb.actuators",),
    ("jaxmb.simulation",),
    ("jaxmb.vdc",),
    ("jaxmb.io",),
    ("jaxmb.models",),
    ("jaxmb",),  # the package's face: re-exports of the core
    ("jaxmb.cli",),  # the dispatcher: finds the commands by entry point, imports none
    ("jaxmb.identification", "jaxmb.control"),  # the workflows, side by side
    ("jaxmb.commands",),  # each command, over both workflows
)
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package)} of every module that installs under jaxmb."""
    out = {}
    for folder, prefix in ((ROOT / "jaxmb", "jaxmb"), (ROOT / "identification",
                           "jaxmb.identification"), (ROOT / "control", "jaxmb.control")):  # fmt: skip
        for p in sorted(folder.rglob("*.py")):
            parts = [prefix, *p.relative_to(folder).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, int]]:
    """The jaxmb modules (or packages) that ``name`` imports, with their line numbers."""
    path, is_pkg = MODULES[name]
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here[: len(here) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            out += [(m, node.lineno) for m in subs or [base]]
    return [(m, line) for m, line in out if m == "jaxmb" or m.startswith("jaxmb.")]


def _unit(name: str) -> str:
    return max((u for u in LAYER if name == u or name.startswith(u + ".")), key=len)


GRAPH = {name: _imports(name) for name in MODULES}


def test_every_module_sits_in_a_layer():
    """A new subpackage or top-level module gets its place in LAYERS, not the face's."""
    loose = [m for m in MODULES if _unit(m) == "jaxmb" and m != "jaxmb"]
    assert not loose, f"modules in no layer (add them to LAYERS): {loose}"


def test_every_import_names_a_module_that_exists():
    missing = [
        f"{MODULES[m][0].relative_to(ROOT)}:{line}: {target}"
        for m, edges in GRAPH.items()
        for target, line in edges
        if target not in MODULES
    ]
    assert not missing, "\n".join(missing)


def test_imports_run_down_the_layers_never_sideways():
    bad = []
    for m, edges in GRAPH.items():
        unit = _unit(m)
        for target, line in edges:
            to = _unit(target)
            if to != unit and LAYER[to] >= LAYER[unit]:
                kind = "sideways" if LAYER[to] == LAYER[unit] else "upward"
                bad.append(f"{MODULES[m][0].relative_to(ROOT)}:{line}: {kind}: {m} -> {target}")
    assert not bad, "\n".join(bad)


def test_no_import_circle():
    """Depth-first search for a back edge; a module importing its own package's face (whose
    `__init__` imports that module) is a circle too."""
    state, path, circles = {}, [], []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for target, _ in GRAPH.get(m, ()):
            if state.get(target) == "open":
                circles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target in GRAPH and target not in state:
                visit(target)
        path.pop()
        state[m] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not circles, "\n".join(circles)


def test_the_checks_find_what_they_look_for():
    """The walker sees a lazy import inside a function, and the rules flag what they should."""
    tree = ast.parse("def f():\n    from jaxmb.control import tuning\n")
    inner = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert inner and inner[0].module == "jaxmb.control"
    assert _unit("jaxmb.control.tuning") == "jaxmb.control"
    assert _unit("jaxmb.multibody.spatial") == "jaxmb.multibody"
    assert LAYER[_unit("jaxmb.control.tuning")] == LAYER[_unit("jaxmb.identification.replay")]
    assert LAYER["jaxmb.io"] < LAYER["jaxmb.models"] < LAYER["jaxmb.cli"] < LAYER["jaxmb.commands"]


def test_importing_starts_no_jax_backend():
    """`jaxmb --cpu-devices N` splits the CPU by XLA's flags after the package is imported and
    the commands are registered: an array created at import time (a module constant) would
    start JAX's backend first and leave one device. A fresh process, as the command runs."""
    code = (
        "import os, jaxmb, jaxmb.identification, jaxmb.control, jaxmb.cli;"
        "jaxmb.cli.build_parser();"
        "os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=3';"
        "import jax; print(jax.device_count())"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, cwd=ROOT)  # fmt: skip
    assert out.stdout.split()[-1] == "3", out.stdout + out.stderr


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each private name (``_x``, not ``__x__``) a module takes from another
    jaxmb module: imported by name, or read off an imported module (``mod._x``)."""
    private = lambda n: n.startswith("_") and not n.endswith("__")  # noqa: E731
    modules, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                "jaxmb")):  # fmt: skip
            base = node.module or ""
            for a in node.names:
                if private(a.name):
                    out.append((node.lineno, f"{base}.{a.name}"))
                elif f"{base}.{a.name}" in MODULES or node.level:
                    modules.add(a.asname or a.name)  # a module imported by name
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.asname and a.name.startswith("jaxmb")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and private(node.attr)):  # fmt: skip
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return out


def test_private_names_stay_in_their_module():
    """Issue 30 point 4: a helper another module needs is public where it belongs."""
    bad = [
        f"{MODULES[m][0].relative_to(ROOT)}:{line}: {name}"
        for m, (path, _) in MODULES.items()
        for line, name in _private_uses(ast.parse(path.read_text()))
    ]
    assert not bad, "\n".join(bad)
    # and the check sees both forms
    tree = ast.parse("from jaxmb.io import logs\nfrom jaxmb.io.logs import _x\nlogs._y\n")
    assert [n for _, n in _private_uses(tree)] == ["jaxmb.io.logs._x", "logs._y"]
