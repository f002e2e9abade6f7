"""In an `sf` process models build on first use (contract.base.defer_builds), and are exactly as
strict then as when built at import. Run in a fresh interpreter: deferral applies only to models
defined after the call."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from starforge.contract.base import defer_builds
defer_builds()
from pydantic import ValidationError
from starforge.contract import api
assert not api.MissingBlobsRequest.__pydantic_complete__, "built at import"
try:
    api.MissingBlobsRequest(digests=[], surprise=1)
except ValidationError as err:
    print("refused:", err.errors()[0]["type"])
read = api.MissingBlobsResponse.read('{"missing": [], "added_later": 1}')
print("read:", read.missing)
"""


def test_a_deferred_model_is_strict_when_built_and_lenient_when_read() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["refused: extra_forbidden", "read: []"]
