"""Living with other instrumentation: an APM agent, tracer or profiler wrapping the same Composer methods.

Each foreign wrapper is a real one — a ``functools.wraps`` wrapper, as ddtrace/Sentry-style agents write them, and a
``wrapt`` wrapper, as OpenTelemetry's instrumentations do — installed after ``enable()`` or before it, across
enable/disable/enable, then removed by its owner. The shim must never remove it, and must never leave itself active
where it said it was off.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import pytest
import wrapt
from conftest import FAMILY, IS_AFFECTED, NEEDS_PATCH, make_device
from workload import Probe, loader, trainer

import compatshim
from compatshim.config.support import Family

pytestmark = [pytest.mark.device, pytest.mark.python]

TARGETS = [('composer.trainer.trainer', 'Trainer', '_train_loop'), ('composer.core.data_spec', 'DataSpec', '__init__')]


class Agent:
    """A foreign patcher: wraps ``owner.name``, counts calls, and unpatches by putting back what it saw."""

    def __init__(self, owner: type, name: str, kind: str) -> None:
        self.owner, self.name, self.kind, self.calls = owner, name, kind, 0
        self.saw = vars(owner)[name]
        if kind == 'functools':
            inner = self.saw

            @functools.wraps(inner)
            def traced(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return inner(*args, **kwargs)

            setattr(owner, name, traced)
        else:

            def traced_wrapt(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
                self.calls += 1
                return wrapped(*args, **kwargs)

            wrapt.wrap_function_wrapper(owner, name, traced_wrapt)
        self.wrapper = vars(owner)[name]

    def is_on_top(self) -> bool:
        return vars(self.owner)[self.name] is self.wrapper

    def unpatch(self) -> None:
        assert self.is_on_top(), 'the agent expects its own wrapper to still be there'
        setattr(self.owner, self.name, self.saw)


def _classes() -> dict[str, type]:
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    return {'Trainer': Trainer, 'DataSpec': DataSpec}


def _snapshot() -> list[dict[str, Any]]:
    return [dict(vars(cls)) for cls in _classes().values()]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return all(x.keys() == y.keys() and all(x[k] is y[k] for k in x) for x, y in zip(a, b))


def _one_step() -> str:
    """Train one step with a probe ``device_transforms``: where it ran, ``never called``, or ``TypeError``."""
    from composer.core import DataSpec

    probe = Probe()
    try:
        spec, rejected = DataSpec(loader(8), device_transforms=probe), False
    except TypeError:  # 0.29+ without the shim; train anyway, so that the loops (and their wrappers) run
        spec, rejected = DataSpec(loader(8)), True
    t, _ = trainer(make_device(), train_dataloader=spec, max_duration='1ba', device_train_microbatch_size=4)
    t.fit()
    if rejected:
        return 'TypeError'
    return probe.calls[0].placement if probe.calls else 'never called'


#: What one step gives without the shim (Composer's own behaviour) on this release.
UNPATCHED = None


def _unpatched() -> str:
    global UNPATCHED
    if UNPATCHED is None:
        UNPATCHED = _one_step()
    return UNPATCHED


AGENTS = pytest.mark.parametrize('kind', ['functools', 'wrapt'])
WHERE = pytest.mark.parametrize('target', TARGETS, ids=[f'{c}.{n}' for _, c, n in TARGETS])


@NEEDS_PATCH
@AGENTS
@WHERE
def test_agent_after_enable_survives_disable_and_reenable(kind: str, target: tuple[str, str, str]) -> None:
    owner, name = _classes()[target[1]], target[2]
    pristine = _snapshot()
    unpatched = _unpatched()
    assert unpatched != 'device', 'an affected release must not place the transform on the device by itself'
    compatshim.enable()
    ours = vars(owner)[name]
    agent = Agent(owner, name, kind)

    # The warning names the wrapper on top, the agent's own function (functools.wraps copies the wrapped function's
    # name onto it: the shim used to name Composer's method there).
    wrapper = r'traced_wrapt \(wrapt\)' if kind == 'wrapt' else 'traced'
    with pytest.warns(
        compatshim.CompatShimWarning,
        match=rf'{target[1]}\.{name} \(now test_coexistence\.(Agent\.__init__\.<locals>\.)?{wrapper}\) were wrapped',
    ):
        compatshim.disable()
    assert agent.is_on_top(), "disable() removed another library's wrapper"
    assert compatshim.status().verdict is compatshim.Verdict.AFFECTED and not compatshim.is_patched(owner, name)
    calls = agent.calls
    assert _one_step() == unpatched, 'switched off, the shim must behave exactly as without it'
    assert agent.calls > calls, "the other library's wrapper must still run"

    with warnings.catch_warnings():
        warnings.simplefilter('error')
        compatshim.enable()
    assert agent.is_on_top() and compatshim.is_patched(owner, name)
    assert agent.wrapper.__wrapped__ is ours, 're-enable must switch the old wrapper back on, not stack a new one'
    calls = agent.calls
    assert _one_step() == 'device'
    assert agent.calls > calls

    agent.unpatch()  # the agent leaves; the shim is on top again and restores exactly
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        compatshim.disable()
    assert _same(pristine, _snapshot())


@NEEDS_PATCH
@AGENTS
@WHERE
def test_agent_before_enable_is_kept_beneath(kind: str, target: tuple[str, str, str]) -> None:
    owner, name = _classes()[target[1]], target[2]
    pristine = _snapshot()
    agent = Agent(owner, name, kind)
    with_agent = _snapshot()
    for stage in ('batch', 'microbatch'):  # enable/disable/enable
        compatshim.enable(stage=stage)
        assert compatshim.get_original(owner, name) is getattr(owner, name).__wrapped__
        calls = agent.calls
        assert _one_step() == 'device'
        assert agent.calls > calls, "the other library's wrapper must run beneath the shim"
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            compatshim.disable()
        assert _same(with_agent, _snapshot()), 'disable() must put back exactly what the agent had installed'
    agent.unpatch()
    assert _same(pristine, _snapshot())


def test_agent_on_an_unaffected_or_patched_release_never_breaks_training() -> None:
    """On every release (0.24.1 included): an agent on the train loop, the shim on and off, the step still runs."""
    owner = _classes()['Trainer']
    agent = Agent(owner, '_train_loop', 'functools')
    try:
        compatshim.enable()
        assert _one_step() == 'device'
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            compatshim.disable()
        assert _one_step() == ('device' if not IS_AFFECTED else _unpatched())
        assert agent.calls == 2
    finally:
        compatshim.disable()
        if agent.is_on_top():
            agent.unpatch()


@NEEDS_PATCH
def test_an_attribute_replaced_outright_is_left_alone() -> None:
    """Someone put a function back without keeping the shim's wrapper: disable() must not overwrite it."""
    owner = _classes()['Trainer']
    original = vars(owner)['_train_loop']
    compatshim.enable()

    def replacement(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    owner._train_loop = replacement
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            compatshim.disable()
        assert vars(owner)['_train_loop'] is replacement
    finally:
        owner._train_loop = original


@NEEDS_PATCH
def test_agent_leaves_while_the_shim_is_off() -> None:
    """enable, agent, disable (shim inert beneath), agent leaves (shim's inert wrapper on top), enable, disable."""
    owner = _classes()['Trainer']
    pristine = _snapshot()
    compatshim.enable()
    agent = Agent(owner, '_train_loop', 'functools')
    with pytest.warns(compatshim.CompatShimWarning):
        compatshim.disable()
    agent.unpatch()
    with warnings.catch_warnings():
        warnings.simplefilter('error', compatshim.CompatShimWarning)
        compatshim.enable()
        assert compatshim.is_patched(owner, '_train_loop') and _one_step() == 'device'
        compatshim.disable()
    assert _same(pristine, _snapshot())


@NEEDS_PATCH
def test_inert_wrapper_dropped_by_someone_else_is_not_revived() -> None:
    """If the chain holding the shim's inert wrapper is replaced outright, the next enable() patches afresh."""
    owner = _classes()['Trainer']
    composer_loop = vars(owner)['_train_loop']
    compatshim.enable()
    Agent(owner, '_train_loop', 'wrapt')
    with pytest.warns(compatshim.CompatShimWarning):
        compatshim.disable()
    owner._train_loop = composer_loop  # e.g. the agent was reloaded and restored what it first saw at import
    compatshim.enable()
    assert vars(owner)['_train_loop'].__wrapped__ is composer_loop and _one_step() == 'device'
    compatshim.disable()
    assert vars(owner)['_train_loop'] is composer_loop


class Traced:
    """A tracer's data descriptor over another (``__wrapped__``): counts the reads it passes on."""

    def __init__(self, inner: Any) -> None:
        self.__wrapped__, self.reads = inner, 0

    def __get__(self, spec: Any, owner: Any = None) -> Any:
        if spec is None:
            return self
        self.reads += 1
        return self.__wrapped__.__get__(spec, owner)

    def __set__(self, spec: Any, value: Any) -> None:
        self.__wrapped__.__set__(spec, value)


class InDict:
    """A plain data descriptor for ``name`` over the instance's own ``__dict__``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, spec: Any, owner: Any = None) -> Any:
        return self if spec is None else vars(spec)[self.name]

    def __set__(self, spec: Any, value: Any) -> None:
        vars(spec)[self.name] = value


@pytest.mark.skipif(FAMILY in (None, Family.HOST), reason='0.27+: the hook names are ones Composer reads by name')
def test_a_descriptor_on_the_hook_name_is_seen_through() -> None:
    """Another library's descriptor put on ``DataSpec.batch_transforms`` after ``enable()`` (a tracer's, over the
    instance's value): the trainer's read through the loop's view still passes through it, and the transform runs on
    the device."""
    from composer.core import DataSpec

    compatshim.enable()
    traced = Traced(InDict('batch_transforms'))
    DataSpec.batch_transforms = traced
    try:
        assert _one_step() == 'device' and traced.reads
    finally:
        del DataSpec.batch_transforms
