"""The pytest plugin, as a user meets it: a test file of their own, using only the plugin's fixtures, run by pytest in
a fresh process with the plugin found through its ``pytest11`` entry point.

The user's test must pass with ``--compatshim`` (the plugin's option does not depend on the release: once on each
Python of the table, in its newest release's env: ``each-python``), and fail without it on every affected family
(0.25–0.26: the transform runs on the host; 0.27–0.28: never called; 0.29+: TypeError) — the plugin's own control
leg. The options' parsing (the bare flag, a stage, a bad stage) is tested without a child, in
``tests/unit/test_plugin_options.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_TEST = textwrap.dedent("""
    import torch
    from composer import Trainer
    from composer.core import DataSpec
    from composer.models import ComposerClassifier
    from torch.utils.data import DataLoader, TensorDataset


    def gpu_augment(batch):
        x, y = batch
        return x * 2.0, y


    def test_my_transform_runs_on_the_device(compatshim_device, compatshim_probe):
        data = TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,)))
        probe = compatshim_probe(gpu_augment)
        trainer = Trainer(
            model=ComposerClassifier(torch.nn.Linear(8, 2), num_classes=2),
            train_dataloader=DataSpec(DataLoader(data, batch_size=8), device_transforms=probe),
            device=compatshim_device,
            max_duration='2ba',
            progress_bar=False,
        )
        trainer.fit()
        probe.assert_on_device()


    def test_placement_helper(compatshim_device, compatshim_placement):
        assert compatshim_placement([torch.zeros(2)]) == 'host'
        assert compatshim_placement([compatshim_device.tensor_to_device(torch.zeros(2))]) == 'device'


    def test_shim_state(request):
        import compatshim

        status = compatshim.status()  # affected releases: the asked stage; without --compatshim, or 0.24.1: off
        assert status.stage == (request.config.getoption('compatshim') if status.family else None)
""")


def _pytest(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / 'test_user.py').write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('COMPATSHIM_', 'PYTEST_', 'COV_'))}
    env.update(extra)
    return subprocess.run(
        [
            sys.executable,
            '-m',
            'pytest',
            '-q',
            '-p',
            'no:cacheprovider',
            '-W',
            'ignore::DeprecationWarning',
            *args,
            'test_user.py',
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.runs_in('each-python')
def test_user_test_passes_with_the_shim(tmp_path: Path) -> None:
    """With a bad COMPATSHIM_STAGE in the environment too: the stage given on the command line wins (it used to be
    an INTERNALERROR)."""
    proc = _pytest(tmp_path, '--compatshim=batch', '-W', 'default::UserWarning', COMPATSHIM_STAGE='bogus')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '3 passed' in proc.stdout


@pytest.mark.runs_in('family:rejected')
def test_control_inactive_unless_asked(tmp_path: Path) -> None:
    """Without --compatshim the plugin enables nothing, and the user's test catches the bug: the control of the test
    above, where it runs (whether the plugin enables does not depend on the release; the placement the user's test
    checks is every release's in-process tests')."""
    proc = _pytest(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert '1 failed, 2 passed' in proc.stdout, proc.stdout
    assert 'test_my_transform_runs_on_the_device' in proc.stdout
