"""``compatshim run``: start a command with the shim armed in every Python process of the run.

After ``ddtrace-run`` and ``opentelemetry-instrument``: this package's directory (:data:`BOOTSTRAP_DIR`, inside the
installed package) goes first on ``PYTHONPATH`` and the settings into environment variables (docs/configuration.md),
which every Python process started from the command inherits — Composer's launcher and its ranks, ``multiprocessing``
children, subprocesses. Its ``sitecustomize`` (the file beside this one) chains to any ``sitecustomize`` that was
already there and arms an import hook that enables the shim once Composer has been imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import NoReturn, Optional

from compatshim.config.settings import ALLOW_UNTESTED_VAR, MONITOR_VAR, STAGE_VAR, monitor, resolve

__all__ = ['BOOTSTRAP_DIR', 'armed', 'child_environment', 'exec_command', 'without_bootstrap']

#: The directory whose ``sitecustomize.py`` arms the import hook. It holds nothing else that could be imported.
BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))


def armed() -> bool:
    """Whether ``compatshim run``'s import hook is armed in this process (its ``sitecustomize`` ran, and Composer has
    not been imported yet): the shim will be enabled when Composer is imported."""
    import sys

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
    """``environ`` with :data:`BOOTSTRAP_DIR` first on ``PYTHONPATH`` (once) and the shim's settings (``monitor_mode``:
    ``on`` or ``strict`` sets ``COMPATSHIM_MONITOR``; ``None`` leaves it as it is).

    Raises:
        ConfigurationError: ``stage``, or a setting already in ``environ``, is not allowed (the message names it).
    """
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


def exec_command(command: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``command`` (looked up on ``PATH``) in ``env``."""
    os.execvpe(command[0], list(command), dict(env))
