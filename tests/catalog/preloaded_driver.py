"""The catalog tests' preloaded python: ``python -m tests.catalog.preloaded_driver``.

It imports the training stack as the warm trainer does (``warm.preload_trainer``), says
``{"ready": true}``, then for each request line ``{"argv", "cwd", "env", "stdout", "stderr"}``
(the output files, which the caller made empty) starts the job and answers ``{"pid",
"forked", "why"}``, then ``{"code"}`` once it has ended.

A job is forked, as the local executor's jobs are, when its environment matches the one the
stack was imported under apart from the per-run variables and its program is a script or module
of this interpreter (``jobfork.env_difference``, ``jobfork.program_of``): the child becomes the
program (``fresh.become``, stdout and stderr to their own files, unlike a runner's one log) and
runs it as ``python`` would. Any other job starts with Popen, and ``why`` says why. The exit code
is Popen's: a negative signal number for a job a signal ended.
"""

import json
import os
import subprocess
import sys

from starforge.runner import fresh, jobfork, warm
from tests import forking


def _fork(argv: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str) -> int:
    kind, what, args = jobfork.program_of(argv) or ("script", "", [])

    def job() -> int:
        out = os.open(stdout, os.O_WRONLY | os.O_APPEND, 0o644)
        fresh.become(stdin=os.devnull, stdout=out, cwd=cwd, env=jobfork.job_environ(env))
        err = os.open(stderr, os.O_WRONLY | os.O_APPEND, 0o644)
        os.dup2(err, 2)
        os.close(err)
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:  # a fresh interpreter draws its seed anew
            numpy_random.seed()
        return (fresh.run_module if kind == "module" else fresh.run_script)(what, args)

    return forking.fork_program(job)


def main() -> None:
    warm.preload_trainer(dict(os.environ))
    forking.answer({"ready": True})
    for line in sys.stdin:
        job = json.loads(line)
        argv, cwd, env = list(job["argv"]), str(job["cwd"]), dict(job["env"])
        why = ""
        if jobfork.imported_under() is None:
            why = "the stack's imports initialised CUDA"
        elif jobfork.program_of(argv) is None:
            why = f"{argv[0]} is not a script or module of this interpreter"
        elif differ := jobfork.env_difference(env, set()):
            why = f"its environment differs from the imports' ({', '.join(differ[:5])})"
        if why:
            with open(job["stdout"], "ab") as out, open(job["stderr"], "ab") as err:
                proc = subprocess.Popen(
                    argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
                )
            forking.answer({"pid": proc.pid, "forked": False, "why": why})
            code = proc.wait()
        else:
            pid = _fork(argv, cwd, env, job["stdout"], job["stderr"])
            forking.answer({"pid": pid, "forked": True, "why": ""})
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        forking.answer({"code": code})


if __name__ == "__main__":
    main()
