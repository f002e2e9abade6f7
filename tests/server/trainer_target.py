"""A runner played by a test (``python -m tests.server.trainer_target BINDING``), started by the
local executor from its warm runner or warm trainer: it prints, as one JSON line, which warm
process forked it and what that process imported the stack under, then sleeps until stopped."""

import json
import os
import sys
import time

from starforge.runner import jobfork


def forked_by() -> list[str]:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
        return [part.decode() for part in fh.read().split(b"\0") if part]


def environ_at_exec() -> set[str]:
    """The names in /proc/self/environ: what the process that forked this one was started with
    (fork keeps it; os.environ's later changes do not reach it)."""
    with open("/proc/self/environ", "rb") as fh:
        return {item.split(b"=", 1)[0].decode() for item in fh.read().split(b"\0") if item}


if __name__ == "__main__":
    imported = jobfork.imported_under()
    print(
        json.dumps(
            {
                "forked_by": forked_by(),
                "imported": imported is not None,
                "hf_home": (imported or {}).get("HF_HOME"),
                "binding": sys.argv[1],
                "exec_env": sorted(environ_at_exec()),
            }
        ),
        flush=True,
    )
    while True:
        time.sleep(0.05)
