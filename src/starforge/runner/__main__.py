"""``python -m starforge.runner BINDING_JSON``: run one node of one attempt of a run.

A cold runner (Slurm's ``srun`` starts one per node) is a short-lived process that uses a few of
the contract's models: they build their validators on first use, not at import
(:mod:`starforge.contract.buildmode`), so it pays only for the models its start needs. A runner
forked from a warm one (:mod:`starforge.runner.warm`) finds its models built already. Where the
server compiled the launch plan and unpacked the package, the job starts before pydantic, the
catalog and the HTTP client are imported (:mod:`starforge.runner.quick`).
"""

import sys

from starforge.contract import buildmode

buildmode.DEFER = True  # before any model is imported

from starforge.runner import quick  # noqa: E402


def main(argv: list[str]) -> int:
    started = quick.start(argv)  # the job first, where the server compiled its plan
    from starforge.runner import main as full

    return full.main(argv) if started is None else full.carry_on(started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
