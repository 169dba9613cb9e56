"""Patching by code shape: the checks read code objects, so they refuse genuinely changed code with a precise
message, with or without source, and name a wrapper that hides what it wraps. In-process, on every release, and on
every Python of the factor (code objects differ by interpreter). A sourceless Composer under ``compatshim run`` is
``tests/process/test_run.py``'s ``sourceless`` scenario.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY

import compatshim
from compatshim.config.support import Family
from compatshim.shim.shape import check_shape

pytestmark = pytest.mark.python


def _function(code: str, name: str) -> Any:
    """A function compiled from a string: it has a code object and no retrievable source, like a .pyc-only install."""
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(code), '<no source>', 'exec'), namespace)
    return namespace[name]


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected: no family to check against')
def test_changed_code_is_refused_precisely_without_source() -> None:
    """A release whose train loop stopped using the hook is named, method and name, from its code object alone."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    hook = 'device_transforms' if FAMILY is Family.HOST else 'batch_transforms'
    changed = type(
        'Trainer',
        (Trainer,),
        {
            '_train_loop': _function(
                """
        def _train_loop(self):
            return self.state.batch  # no longer calls the batch-level hook
    """,
                '_train_loop',
            )
        },
    )
    with pytest.raises(
        compatshim.UnexpectedComposerShapeError,
        match=rf'Trainer\._train_loop no longer uses {hook}\)?.*Nothing was patched',
    ):
        check_shape(FAMILY, DataSpec, changed, COMPOSER)
    nested = type(
        'Trainer',
        (Trainer,),
        {
            '_train_loop': _function(
                f"""
        def _train_loop(self):
            def inner(spec):
                return [spec.{hook}(b) for b in self.batches]  # used only inside nested code
            return inner
    """,
                '_train_loop',
            )
        },
    )
    check_shape(FAMILY, DataSpec, nested, COMPOSER)


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected: no family to check against')
def test_a_wrapper_that_hides_the_method_is_named() -> None:
    """An agent's wrapper without ``__wrapped__`` is not taken for a changed Composer: the message says what it is."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    original = Trainer._train_loop

    def opaque_tracer(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    hidden = type('Trainer', (Trainer,), {'_train_loop': opaque_tracer})
    with pytest.raises(
        compatshim.UnexpectedComposerShapeError,
        match=r'Trainer\._train_loop is test_shape\..*opaque_tracer, a wrapper that hides',
    ):
        check_shape(FAMILY, DataSpec, hidden, COMPOSER)
