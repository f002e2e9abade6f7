"""``python -m starforge.runner BINDING_JSON``: run one node of one attempt of a run.

A cold runner (Slurm's ``srun`` starts one per node) is a short-lived process that uses a few of
the contract's models: they build their validators on first use, not at import
(:mod:`starforge.contract.buildmode`), so it pays only for the models its start needs. A runner
forked from a warm one (:mod:`starforge.runner.warm`) finds its models built already.
"""

import sys

from starforge.contract import buildmode

buildmode.DEFER = True  # before any model is imported

from starforge.runner.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
