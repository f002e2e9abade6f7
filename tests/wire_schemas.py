"""Print the wire of the StarForge this interpreter imports, as JSON: the HTTP API's OpenAPI
document, and the JSON schemas of what crosses a process boundary outside it (the runner's
binding, the log stream's events).

Run by this release's interpreter and by the previous release's (tests/previous_release.py), so
tests/wire_compat.py can compare the two; it uses nothing the first release lacked.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path

# Read, not sent, by the other side: the runner reads the binding the server writes; the CLI
# reads the log stream's events.
OTHER_ANSWERS = [
    "starforge.contract.env:Binding",
    "starforge.contract.api:StreamLog",
    "starforge.contract.api:StreamAttempt",
    "starforge.contract.api:StreamStatus",
    "starforge.contract.api:StreamEnd",
]


def main() -> None:
    from starforge.server.app import create_app
    from starforge.server.settings import Settings

    with tempfile.TemporaryDirectory() as home:
        app = create_app(Settings(home=Path(home), embedded=False), run_loops=False)
        openapi = app.openapi()
    models = {}
    for name in OTHER_ANSWERS:
        module, _, attr = name.partition(":")
        model = getattr(importlib.import_module(module), attr, None)
        if model is not None:
            models[attr] = model.model_json_schema(ref_template="#/$defs/{model}")
    json.dump({"openapi": openapi, "models": models}, sys.stdout)


if __name__ == "__main__":
    main()
