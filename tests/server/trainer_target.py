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


if __name__ == "__main__":
    imported = jobfork.imported_under()
    print(
        json.dumps(
            {
                "forked_by": forked_by(),
                "imported": imported is not None,
                "hf_home": (imported or {}).get("HF_HOME"),
                "binding": sys.argv[1],
            }
        ),
        flush=True,
    )
    while True:
        time.sleep(0.05)
