#!/usr/bin/env bash
# One entry point for a fresh machine: creates .venv if needed, installs jaxmb (editable) with
# its test extra when pyproject.toml changed since the last install, then runs
#   bash scripts/dev.sh run  [jaxmb arguments]   -> the `jaxmb` command (the main job)
#   bash scripts/dev.sh test [pytest arguments]  -> ruff, then the test suite
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=.venv/.jaxmb-install-stamp
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c "import jaxmb" 2>/dev/null; then
  echo "setting up .venv (first run takes a few minutes)..." >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" >"$stamp"
fi
cmd=${1:-run}
shift || true
case "$cmd" in
  run) exec .venv/bin/jaxmb "$@" ;;
  test)
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    exec .venv/bin/python -m pytest "$@"
    ;;
  *) echo "usage: bash scripts/dev.sh {run|test} [args]" >&2; exit 2 ;;
esac
