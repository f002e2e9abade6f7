"""``python -m starforge.runner BINDING_JSON``: run one node of one attempt of a run."""

import sys

from starforge.runner.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
