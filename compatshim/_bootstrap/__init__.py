"""``compatshim run``: start a command with the shim armed in every Python process of the run.

As ``ddtrace-run`` does: :data:`BOOTSTRAP_DIR` goes first on ``PYTHONPATH`` and the settings into environment
variables, which every process started from the command inherits; its ``sitecustomize`` chains to any that was there
and arms an import hook that enables the shim once Composer has been imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Optional

from compatshim.config.settings import ALLOW_UNTESTED_VAR, MONITOR_VAR, STAGE_VAR, monitor, resolve

__all__ = ['BOOTSTRAP_DIR', 'armed', 'child_environment', 'without_bootstrap']

#: The directory whose ``sitecustomize.py`` arms the import hook (nothing else in it can be imported).
BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))


def armed() -> bool:
    """Whether ``compatshim run``'s import hook is armed in this process: the shim is enabled when Composer is
    imported."""
    return any(
        type(finder).__name__ == 'ComposerImportHook' and type(finder).__module__ == 'sitecustomize'
        for finder in sys.meta_path
    )


def without_bootstrap(pythonpath: str) -> list[str]:
    """The entries of a ``PYTHONPATH`` value, empty ones and :data:`BOOTSTRAP_DIR` left out."""
    return [p for p in pythonpath.split(os.pathsep) if p and os.path.abspath(p) != BOOTSTRAP_DIR]


def child_environment(
    environ: Mapping[str, str], stage: Optional[str], allow_untested: bool, monitor_mode: Optional[str] = None
) -> dict[str, str]:
    """``environ`` with :data:`BOOTSTRAP_DIR` first on ``PYTHONPATH`` (once) and the shim's settings (``None``:
    left as they are); raises ``ConfigurationError`` if one of them is not allowed."""
    env = dict(environ)
    if stage is not None:
        env[STAGE_VAR] = stage
    if allow_untested:
        env[ALLOW_UNTESTED_VAR] = '1'
    if monitor_mode is not None:
        env[MONITOR_VAR] = '1' if monitor_mode == 'on' else monitor_mode
    env['PYTHONPATH'] = os.pathsep.join([BOOTSTRAP_DIR, *without_bootstrap(env.get('PYTHONPATH', ''))])
    resolve(environ=env)  # validate now, in the parent, rather than in every rank after it started
    monitor(env)
    return env
