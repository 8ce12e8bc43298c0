"""What the study commands (``montecarlo``, ``tune``) share before anything compiles: the
device options checked, the output folder checked writable (made only once every input has
passed), the devices set up and the study's configuration loaded and checked."""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxmb.cli import check_device_options, check_writable, setup_devices

__all__ = ["open_study"]


def open_study(args: argparse.Namespace, command: str) -> tuple[Path, dict]:
    """``(out, cfg)`` of a study command: ``args.out`` and ``args.config`` loaded
    (`jaxmb.control.study_config.load_config`); a refusal names ``command``."""
    check_device_options(args, command)
    out = Path(args.out)
    check_writable(out)
    setup_devices(args)
    from jaxmb.control.study_config import load_config

    try:
        return out, load_config(args.config)
    except ValueError as err:
        raise SystemExit(f"jaxmb {command}: {err}") from None
