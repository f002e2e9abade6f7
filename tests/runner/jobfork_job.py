"""A job of the job-fork tests (``python jobfork_job.py MODE``): imports the test stack, prints
what it was given as one JSON line, then ends as MODE says."""

import json
import os
import random
import sys
import time

import numpy

import tests.runner.jobfork_stack  # noqa: F401  (what a warm trainer preloads)


def seen() -> dict[str, object]:
    return {
        "name": __name__,
        "argv": sys.argv,
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stderr_is_stdout": os.path.samestat(os.fstat(1), os.fstat(2)),
        "pgid": os.getpgid(0),
        "ppid": os.getppid(),
        "random": random.random(),
        "numpy": float(numpy.random.random()),
    }


if __name__ == "__main__":
    print(json.dumps(seen()), flush=True)
    mode = sys.argv[1] if len(sys.argv) > 1 else "exit0"
    if mode == "gate":  # ends once the file argv[2] exists
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.01)
    if mode == "exit3":
        sys.exit(3)
    if mode == "message":
        sys.exit("the job gave up")
    if mode == "raise":
        raise RuntimeError("the job broke")
    if mode == "interrupt":
        raise KeyboardInterrupt
