"""A state-machine test of the public API (hypothesis): any sequence of ``enable()``, ``disable()``, nested
``enabled()`` blocks, valid and invalid environment settings, and another library's wrapper put on and taken off a
patched method leaves the shim truthful. After every step:

- ``status()`` agrees with what is really installed on Composer's classes (the shim's replacements that are on top,
  or beneath another wrapper, and switched on), and says ``patched`` exactly when something is;
- the stage it reports is the one a DataSpec built now gets (and without the shim, a DataSpec is Composer's own);
- a call that raised changed nothing.

In-process, in the family envs (one per patch family, and 0.24.1).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Optional

import pytest
from conftest import FAMILY, IS_AFFECTED
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from workload import loader

import compatshim
from compatshim.config.support import Family
from compatshim.shim import notes, registry

pytestmark = pytest.mark.runs_in('family')

VARIABLES = {
    'COMPATSHIM_STAGE': ['batch', 'microbatch', 'bogus', ''],
    'COMPATSHIM_ALLOW_UNTESTED': ['1', '0', 'maybe'],
    'COMPATSHIM_DISABLE': ['1', '0', 'maybe'],
}
STAGES = st.sampled_from([None, 'batch', 'microbatch', 'gpu'])
UNTESTED = st.sampled_from([None, True, False, 'no'])


def _classes() -> dict[str, type]:
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    return {'Trainer._train_loop': Trainer, 'DataSpec.__init__': DataSpec}


def _snapshot() -> tuple[Any, ...]:
    return (
        compatshim.status(),
        tuple((key, r.active) for key, r in registry.STATE.patches.live.items()),
        [tuple(vars(cls).items()) for cls in _classes().values()],
    )


class ShimStates(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[Any] = []  # the enabled() blocks entered and not yet left, innermost last
        self.saved_env = {name: os.environ.get(name) for name in VARIABLES}
        self.pristine = {target: vars(owner)[target.split('.')[1]] for target, owner in _classes().items()}
        self.foreign: dict[str, Any] = {}  # target -> (wrapper, what it wrapped)

    def _attempt(self, call: Any) -> None:
        """Run ``call``; if it raises (a setting not allowed), nothing may have changed."""
        before = _snapshot()
        try:
            call()
        except ValueError:  # compatshim.ConfigurationError: an argument or a variable that is not allowed
            assert _snapshot() == before, 'a call that raised changed something'

    @rule(stage=STAGES, untested=UNTESTED)
    def enable(self, stage: Optional[str], untested: Any) -> None:
        self._attempt(lambda: compatshim.enable(stage, allow_untested=untested))

    @rule()
    def disable(self) -> None:
        compatshim.disable()

    @rule(stage=STAGES, untested=UNTESTED)
    def enter_block(self, stage: Optional[str], untested: Any) -> None:
        def enter() -> None:
            block = compatshim.enabled(stage, allow_untested=untested)
            block.__enter__()
            self.blocks.append(block)

        self._attempt(enter)

    @precondition(lambda self: bool(self.blocks))
    @rule()
    def leave_block(self) -> None:
        self.blocks.pop().__exit__(None, None, None)

    @rule(variable=st.sampled_from(sorted(VARIABLES)), data=st.data())
    def set_variable(self, variable: str, data: Any) -> None:
        os.environ[variable] = data.draw(st.sampled_from(VARIABLES[variable]))

    @rule(variable=st.sampled_from(sorted(VARIABLES)))
    def clear_variable(self, variable: str) -> None:
        os.environ.pop(variable, None)

    @rule(method=st.sampled_from(sorted(_classes())))
    def wrap(self, method: str) -> None:
        """Another library (an APM agent) wraps the method, keeping what it wrapped (functools.wraps)."""
        if method in self.foreign:
            return
        owner, name = _classes()[method], method.split('.')[1]
        inner = vars(owner)[name]

        @functools.wraps(inner)
        def traced(*args: Any, **kwargs: Any) -> Any:
            return inner(*args, **kwargs)

        setattr(owner, name, traced)
        self.foreign[method] = (traced, inner)

    @rule(method=st.sampled_from(sorted(_classes())))
    def unwrap(self, method: str) -> None:
        """The other library removes its wrapper, as such libraries do: only while it is still on top."""
        owner, name = _classes()[method], method.split('.')[1]
        if method in self.foreign and vars(owner)[name] is self.foreign[method][0]:
            setattr(owner, name, self.foreign.pop(method)[1])

    @invariant()
    def status_is_what_is_installed(self) -> None:
        shim = compatshim.status()
        live = tuple(r.label for r in registry.STATE.patches.live.values() if compatshim.is_patched(r.owner, r.name))
        assert shim.patches == live, (shim, live)
        assert (shim.verdict is compatshim.Verdict.PATCHED) is bool(live), shim
        assert (shim.stage is not None) is bool(live), shim
        if not IS_AFFECTED:
            assert live == ()

    @invariant()
    def a_dataspec_built_now_gets_the_reported_stage(self) -> None:
        from composer.core import DataSpec

        shim = compatshim.status()
        if shim.verdict is not compatshim.Verdict.PATCHED:
            if FAMILY is Family.REJECTED:
                with pytest.raises(TypeError, match='device_transforms'):
                    DataSpec(loader(4), device_transforms=lambda b: b)
                return
            spec = DataSpec(loader(4), device_transforms=lambda b: b)
            assert notes.stage_of(spec) is None
            return
        fn = lambda b: b  # noqa: E731
        spec = DataSpec(loader(4), device_transforms=fn)
        assert spec.device_transforms is fn and notes.stage_of(spec) == shim.stage

    def teardown(self) -> None:
        """Back to Composer's own classes and the environment from before, whatever the sequence left."""
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        while self.blocks:
            self.leave_block()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            compatshim.disable()
        for target, owner in _classes().items():
            setattr(owner, target.split('.')[1], self.pristine[target])
        registry.STATE.patches.detached.clear()


ShimStates.TestCase.settings = settings(
    max_examples=300, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
)
TestShimStates = ShimStates.TestCase
