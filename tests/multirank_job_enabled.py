"""``tests/multirank_job.py`` with the shim enabled by the script itself, on every rank (the ``shim`` leg)."""

import os
import runpy
from pathlib import Path

import compatshim

compatshim.enable()
os.environ['MULTIRANK_JOB_ENABLED_BY_SCRIPT'] = '1'
runpy.run_path(str(Path(__file__).resolve().parent / 'multirank_job.py'), run_name='__main__')
