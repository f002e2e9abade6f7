"""A module that reads the environment when imported (tests/cli/test_warm_client.py)."""

import os

VALUE = os.environ.get("SF_TEST_READ_AT_IMPORT")
