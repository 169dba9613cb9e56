"""The pytest plugin's options, parsed as pytest parses them (no Composer needed: nothing is enabled here).

That a user's test passes with ``--compatshim`` and fails without it is ``tests/process/test_pytest_plugin.py``.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ('args', 'stage'),
    [
        ([], None),
        (['--compatshim'], 'default'),  # enable()'s own default: COMPATSHIM_STAGE, else batch
        (['--compatshim=batch'], 'batch'),
        (['--compatshim=microbatch'], 'microbatch'),
    ],
)
def test_stage_option(pytester: pytest.Pytester, args: list[str], stage: str) -> None:
    assert pytester.parseconfig(*args).getoption('compatshim') == stage


def test_device_option(pytester: pytest.Pytester) -> None:
    assert pytester.parseconfig().getoption('compatshim_device') == 'cpu'
    assert pytester.parseconfig('--compatshim-device=mps').getoption('compatshim_device') == 'mps'


@pytest.mark.parametrize('args', [['--compatshim=gpu'], ['--compatshim', 'checks/']])
def test_bad_stage_is_a_usage_error(pytester: pytest.Pytester, args: list[str]) -> None:
    """A stage that is not one, or a path after a bare flag (argparse reads it as the stage): one usage error."""
    pytester.mkdir('checks')
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"--compatshim took '{args[-1].removeprefix('--compatshim=')}' for its stage" in err, err
    assert '--compatshim=batch or --compatshim=microbatch' in err and 'after the test paths' in err, err
