"""A pytest plugin for your own tests (docs/testing.md): ``--compatshim[=STAGE]`` enables the shim for the session,
``--compatshim-device`` picks the device the fixtures give. Registered through the ``pytest11`` entry point and inert
unless asked for: torch and Composer are imported only when a test uses a fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable, Optional

import pytest

__all__: list[str] = []

_ENABLED_BY_SESSION = pytest.StashKey[bool]()
#: What a bare ``--compatshim`` stands for: the stage ``enable()`` reads itself (``COMPATSHIM_STAGE``, else ``batch``).
_DEFAULT_STAGE = 'default'


def pytest_addoption(parser: pytest.Parser) -> None:
    from compatshim.config.stages import STAGES
    from compatshim.config.support import DEVICES

    group = parser.getgroup('compatshim', 'compatshim: device_transforms on the device (Composer 0.25+)')
    group.addoption(
        '--compatshim',
        nargs='?',
        const=_DEFAULT_STAGE,
        default=None,
        metavar='STAGE',
        help=f'enable the shim for the session at STAGE ({" or ".join(STAGES)}, written --compatshim=STAGE; bare: '
        'COMPATSHIM_STAGE, else batch, as enable() reads it)',
    )
    group.addoption(
        '--compatshim-device',
        choices=DEVICES,
        default='cpu',
        help='the device the compatshim_device fixture gives (default cpu: the fake accelerator)',
    )


def pytest_configure(config: pytest.Config) -> None:
    from compatshim.config.stages import STAGES

    stage = config.getoption('compatshim', default=None)
    if stage is None:
        return
    # A path after a bare flag reads as its stage: pytest --compatshim tests/
    if stage not in (*STAGES, _DEFAULT_STAGE):
        raise pytest.UsageError(
            f'--compatshim took {stage!r} for its stage; write --compatshim=batch or --compatshim=microbatch, or put a '
            'bare --compatshim after the test paths (in addopts: --compatshim=batch)'
        )
    import compatshim

    try:
        compatshim.enable(stage=None if stage == _DEFAULT_STAGE else stage)
    except compatshim.CompatShimError as exc:  # a bad setting, no Composer: a usage error, named in one line
        raise pytest.UsageError(str(exc)) from None
    config.stash[_ENABLED_BY_SESSION] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_ENABLED_BY_SESSION, False):
        import compatshim

        compatshim.disable()


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    if not config.stash.get(_ENABLED_BY_SESSION, False):
        return None
    import compatshim

    status = compatshim.status()
    return f'compatshim: {status.verdict.value} (Composer {status.composer_version}), stage {status.stage}'


@pytest.fixture
def compatshim_device(request: pytest.FixtureRequest) -> Any:
    """A Composer Device on which placement is observable (fake accelerator on cpu, else the real device)."""
    from compatshim.devices.accelerator import accelerator
    from compatshim.testing import observable_device

    chosen = request.config.getoption('compatshim_device')
    absent = accelerator(chosen).absent()
    if absent:
        pytest.skip(f'--compatshim-device={chosen}, but {absent}')
    return observable_device(chosen)


@pytest.fixture
def compatshim_placement() -> Callable[[Any], str]:
    """``placement(batch)``: ``'device'``, ``'host'``, ``'mixed'`` or ``'empty'``."""
    from compatshim.testing import placement

    return placement


@pytest.fixture
def compatshim_probe() -> Callable[[Callable[[Any], Any]], Any]:
    """``compatshim_probe(fn)`` wraps ``fn`` in a :class:`compatshim.testing.PlacementProbe`."""
    from compatshim.testing import PlacementProbe

    return PlacementProbe


@pytest.fixture
def compatshim_enabled(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The shim enabled for this test (at the ``--compatshim`` stage; else as ``enable()`` leaves a shim already on, or
    reads the stage), and after it as it was before (``compatshim.enabled()``); yields :func:`compatshim.status`."""
    import compatshim

    stage = request.config.getoption('compatshim')
    with compatshim.enabled(stage=None if stage in (None, _DEFAULT_STAGE) else stage) as status:
        yield status


@pytest.fixture
def compatshim_bench(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``compatshim_bench(pipeline, *, compare=None, save=None, directory=None, quick=None, device='cpu', name=None)``:
    the pipeline bench (``compatshim bench --pipeline``, docs/pipeline.md) in this process, returning its result; the
    test fails, naming each metric, when anything worsened against the baseline ``compare``."""

    def run(
        pipeline: Any,
        *,
        compare: Optional[str] = None,
        save: Optional[str] = None,
        directory: Any = None,
        quick: Optional[bool] = None,
        device: str = 'cpu',
        name: Optional[str] = None,
    ) -> Any:
        from compatshim.bench import pipeline as pipelines

        size = None if quick is None and compare else pipelines.size_of('default' if quick is False else 'quick')
        named = name or (pipeline if isinstance(pipeline, str) else request.node.nodeid)
        try:
            baselines = pipelines.Baselines(compare, save, directory)
            gated = pipelines.gate_pipeline(pipeline, named, device=device, size=size, baselines=baselines)
        except ValueError as exc:  # a baseline that cannot be used, or a pipeline that cannot run
            failed = str(exc)
        else:
            failed = '\n'.join(gated.lines) if gated.code else ''
        if failed:
            pytest.fail(failed, pytrace=False)
        return gated.result

    return run
