"""Where a run's curves live: the platform's own console, or an external tracker.

A method declares its mode in ``method.yaml`` (``observability: platform | external``). An
experiment of an ``external`` method may opt into ``platform`` with a top-level section of its
``config.yaml``::

    starforge:
      observability: platform

``platform`` runs report through ``starforge.report`` (the TRL adapters wire it automatically) and
must not name an external URL; ``external`` runs must give ``--observability-url``, which reaches
the job as ``FORGE_OBSERVABILITY_URL`` and is shown by ``sf job status`` and the console. The same
pure functions run in ``sf submit`` and in the server's admission, so both refuse the same things.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from starforge.contract.errors import ConfigError, MissingInput, UsageError

Mode = Literal["platform", "external"]
MODES: tuple[Mode, ...] = ("platform", "external")
SECTION = "starforge"
FLAG = "--observability-url"
_URL = re.compile(r"^https?://[^\s/?#]+[^\s]*$")


def mode_of(declared: str, config: Mapping[str, Any] | None) -> Mode:
    """The run's mode: the method's declaration, unless an external method's experiment opts in."""
    section = (config or {}).get(SECTION)
    if section is None:
        chosen: Any = None
    elif not isinstance(section, Mapping):
        raise ConfigError(
            f"config key {SECTION!r} must be a mapping, e.g. {SECTION}: {{observability: platform}}"
        )
    else:
        chosen = section.get("observability")
    if chosen is not None and chosen not in MODES:
        raise ConfigError(
            f"{SECTION}.observability must be one of {', '.join(MODES)}, not {chosen!r}",
            hint=f"write `{SECTION}: {{observability: platform}}` in the experiment's config.yaml",
        )
    if declared == "external" and chosen == "platform":
        return "platform"
    return "platform" if declared == "platform" else "external"


def check_url(mode: Mode, url: str, method_id: str) -> None:
    """Refuse a URL a ``platform`` run must not have, or a missing / malformed external one."""
    if mode == "platform":
        if url:
            raise UsageError(
                f"method {method_id} keeps its curves on the platform: {FLAG} is not accepted",
                hint=f"drop {FLAG}; `sf job metrics RUN` and the console show the curves",
                details={"mode": mode},
            )
        return
    if not url:
        raise MissingInput(
            f"method {method_id} uses external observability: {FLAG} is required",
            hint=f"add {FLAG} https://wandb.ai/you/project (or opt into the platform's curves "
            f"with `{SECTION}: {{observability: platform}}` in the experiment's config.yaml)",
            details={"missing": [FLAG], "mode": mode},
        )
    if not _URL.match(url):
        raise UsageError(
            f"{FLAG} {url!r} is not an http(s) URL",
            hint="e.g. https://wandb.ai/you/project",
            details={"mode": mode},
        )
