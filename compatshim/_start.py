"""What ``compatshim run``'s import hook and ``import compatshim.auto`` do once Composer is imported: ``enable()``, and
with ``COMPATSHIM_MONITOR`` on, a ``TransformMonitor`` on every Trainer (here, above the shim's core)."""

from __future__ import annotations

import sys

from compatshim.config import settings
from compatshim.shim.api import enable
from compatshim.shim.registry import STATE
from compatshim.shim.status import ShimStatus

__all__ = ['start']


def start(by: str = 'compatshim run') -> ShimStatus:
    """``enable()``, and with ``COMPATSHIM_MONITOR`` on, a ``TransformMonitor`` on every Trainer (also where the shim
    patches nothing); ``by`` becomes :attr:`ShimStatus.enabled_by`. A setting that is not allowed raises first."""
    monitor = settings.monitor()  # validated first: enable() validates its own settings before it changes anything
    with STATE.lock:
        outer = STATE.starting  # compatshim.auto's enable() can fire compatshim run's hook: the outer one names it
        STATE.starting = outer or by
        try:
            shim_status = enable()
        finally:
            STATE.starting = outer
    if monitor == 'off':
        return shim_status
    # compatshim.monitor half-imported (its import of Composer fired compatshim run's hook): it attaches at its end
    half_imported = sys.modules.get('compatshim.monitor')
    if half_imported is not None and not hasattr(half_imported, 'attach_to_every_trainer'):
        STATE.pending = {'strict': monitor == 'strict'}
    else:
        from compatshim.monitor import attach_to_every_trainer

        attach_to_every_trainer(strict=monitor == 'strict')
    return shim_status
