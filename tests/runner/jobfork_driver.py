"""A runner played by the job-fork tests: ``python -m tests.runner.jobfork_driver PLAN``.

It imports the test stack as the warm trainer imports torch and trl, marks it imported, then
for each job of the JSON file PLAN forks a standby and launches the job through it, appending
the job's stdout to the job's log, and prints one JSON line per job: forked (with the job's pid
and exit code) or why not."""

import json
import os
import subprocess
import sys

from starforge.runner import jobfork

if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        plan = json.load(fh)
    before = dict(os.environ)
    import tests.runner.jobfork_stack  # noqa: F401

    jobfork.mark_imported(before)
    for job in plan["jobs"]:
        # As the runner's: the log is open before the standby is forked, which inherits it.
        with open(job["log"], "ab", buffering=0) as log:
            standby = jobfork.Standby.fork()
            assert standby is not None, "one thread and the stack imported: a standby is forked"
            piped = bool(job.get("piped"))  # as for the secrets masker: read from a pipe
            started = standby.launch(
                job["argv"],
                job["cwd"],
                job["env"],
                log_fd=None if piped else log.fileno(),
                per_run=set(),
            )
            if isinstance(started, jobfork.ForkedJob) and piped:
                assert started.stdout is not None
                for line in started.stdout:  # until the job's end closes the pipe
                    log.write(b"piped: " + line)
            if isinstance(started, jobfork.ForkedJob):
                if job.get("gate"):  # a job that cannot end before its gate opens runs on
                    try:
                        started.wait(timeout=0.05)
                        raise AssertionError("the gated job ended before its gate opened")
                    except subprocess.TimeoutExpired:
                        open(job["gate"], "w").close()
                code = started.wait()
                print(json.dumps({"forked": True, "pid": started.pid, "code": code}), flush=True)
            else:
                print(json.dumps({"forked": False, "why": started}), flush=True)
    print(json.dumps({"driver": os.getpid(), "pgid": os.getpgid(0)}), flush=True)
