"""The "training stack" of the job-fork tests: a module that, like torch, changes the
environment when it is imported, and draws from numpy's global generator."""

import os

import numpy

os.environ.setdefault("SET_BY_IMPORT", f"{os.environ.get('TMPDIR', '/tmp')}/stack-cache")
DRAW_AT_IMPORT = float(numpy.random.random())
