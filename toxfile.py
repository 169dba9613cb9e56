"""tox's inline plugin for this project (tox loads ``toxfile.py`` by itself): at the end of a tox run, say what the
run cost in child processes that imported Composer, and list what it did not run, each with its reason and the
command that runs it.

- envs skipped because their interpreter is not on this machine (the Python factor), and how to make it visible;
- tests that ran in *no* env of this run: deselected because they belong to another role's envs (tests/matrix_env.py),
  or skipped with a reason (e.g. the device is absent). ``tests/conftest.py`` writes, per env, which tests ran and
  which did not, into ``.tox/.not-run/``; a test that ran in any env of the run is not listed.

Nothing is printed for a run that ran no test env.
"""

from __future__ import annotations

import atexit
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tox.plugin import impl
from tox.tox_env.errors import Skip

_STARTED = time.time()
_SKIPPED_ENVS: dict[str, str] = {}
_WORK_DIRS: set[Path] = set()


@impl
def tox_env_teardown(tox_env: Any) -> None:
    _WORK_DIRS.add(Path(tox_env.core['work_dir']))
    if tox_env._run_state.get('setup'):  # it ran (or failed on its own): tox reports that itself
        return
    try:
        tox_env.base_python  # noqa: B018 - raises Skip where the interpreter is missing
    except Skip as exc:
        _SKIPPED_ENVS[tox_env.name] = str(exc)
    except Exception:  # noqa: BLE001 - not an interpreter problem: tox reports it itself
        pass


def _records() -> dict[str, dict[str, Any]]:
    """What each test env of this run recorded (``tests/conftest.py``), by env."""
    found = {}
    for work in _WORK_DIRS:
        for record in (work / '.not-run').glob('*.json'):
            if record.stat().st_mtime >= _STARTED:
                found[record.stem] = json.loads(record.read_text())
    return found


def _tests_not_run(records: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    ran = {nodeid for data in records.values() for nodeid in data['ran']}
    by_reason: dict[str, list[str]] = defaultdict(list)
    for nodeid, reason in sorted({k: v for data in records.values() for k, v in data['not_run'].items()}.items()):
        if nodeid not in ran:
            by_reason[reason].append(nodeid)
    return by_reason


def _summary() -> None:
    records = _records()
    counted = {env: data['imports'] for env, data in records.items() if data.get('imports') is not None}
    if counted:
        detail = ', '.join(f'{env} {n}' for env, n in sorted(counted.items(), key=lambda kv: -kv[1]) if n)
        print(f'compatshim: {sum(counted.values())} child processes imported Composer in this run ({detail})')
    lines = []
    for env, reason in sorted(_SKIPPED_ENVS.items()):
        lines.append(
            f'  env {env}: skipped, {reason}; install that Python (pyenv install X.Y) and make it visible '
            f'(PYENV_VERSION, as .ci/run does), then: tox -e {env}'
        )
    for reason, nodeids in sorted(_tests_not_run(records).items(), key=lambda kv: -len(kv[1])):
        example = nodeids[0] + (f' and {len(nodeids) - 1} more' if len(nodeids) > 1 else '')
        lines.append(f'  {len(nodeids)} test(s) ran nowhere in this run ({example}): {reason}')
    if lines:
        print('compatshim: not run by this tox run:\n' + '\n'.join(lines), flush=True)


atexit.register(_summary)
