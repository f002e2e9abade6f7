"""The one HTTP client of StarForge (used by the CLI, the runner and the report SDK).

It stays light (httpx + pydantic + stdlib) because it runs inside training images.
"""

import sys

# httpx imports its own command line (click, rich.progress, pygments) when those are installed:
# a third of its import time, for a tool we never run. A None entry makes that optional import
# fail, and httpx falls back to its stub `main` (its behaviour without the `cli` extra).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
