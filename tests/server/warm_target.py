"""A runner played by a test (``python -m tests.server.warm_target BINDING``): it prints what a
runner's start gave it, as one JSON line, then does what its binding file says (exit, sleep,
raise). Started through the local executor's warm runner, or fresh, to compare the two."""

import gc
import json
import os
import sys
import threading
import time


def describe() -> dict[str, object]:
    return {
        "name": __name__,
        "argv": sys.argv[1:],
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "cwd": os.getcwd(),
        "probe": os.environ.get("STARFORGE_WARM_PROBE", ""),
        "frozen": gc.get_freeze_count(),  # objects the warm process kept from the collector
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "stdin": os.readlink("/proc/self/fd/0"),
    }


def late_line() -> None:
    time.sleep(0.2)
    print("a non-daemon thread ended", flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        mode = fh.read().strip()
    print(json.dumps(describe()), flush=True)
    if mode == "raise":
        raise RuntimeError("the runner broke")
    if mode == "exit":
        threading.Thread(target=late_line).start()
        sys.exit(0)
    while True:
        time.sleep(0.05)
