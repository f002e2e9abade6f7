"""A root runner forked from a warm trainer, played by a security test: ``python -m
tests.security.warm_trainer_driver LOG``. With the stack marked imported and a standby forked,
it starts a job the way the runner does (``Runner._start_child``) as ``nobody``, and prints
whether the job was forked from it (as root) or started fresh, and as whom it ran."""

import json
import os
import sys
from pathlib import Path

from starforge.contract.env import Binding
from starforge.runner import jobfork, jobuser
from starforge.runner.main import Runner

if __name__ == "__main__":
    log_path = Path(sys.argv[1])
    jobfork.mark_imported(dict(os.environ))
    binding = Binding(
        run_id="r-attacker00",
        attempt=1,
        user="mallory",
        storage_root=str(log_path.parent),
        run_dir=str(log_path.parent),
        work_dir=str(log_path.parent),
        out_dir=str(log_path.parent),
        log_path=str(log_path),
        job_user="nobody",
    )
    with open(log_path, "ab", buffering=0) as log:
        runner = Runner(binding, log)
        runner.standby = jobfork.Standby.fork()
        assert runner.standby is not None
        user = jobuser.resolve("nobody")
        assert user is not None
        script = log_path.parent / "whoami.py"
        script.write_text("import os\nprint('uid', os.getuid())\n")
        script.chmod(0o644)
        try:
            job = runner._start_child(
                [sys.executable, str(script)], "/", dict(os.environ), user.popen_kwargs()
            )
        except OSError as exc:  # nobody may not run this interpreter here: it ran as nobody
            print(json.dumps({"forked": False, "refused": exc.strerror}))
            sys.exit(0)
        code = job.wait()
    print(json.dumps({"forked": isinstance(job, jobfork.ForkedJob), "code": code}))
