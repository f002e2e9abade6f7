"""The one base model of everything that crosses a process boundary: built strictly, read leniently.

Every model of ``starforge.contract`` (requests, responses, the JobSpec, the Binding, profiles,
run records, SSE payloads) and of ``catalog/schema.py`` derives from :class:`Contract`.

* **Built** (``Model(...)``, ``Model.model_validate(data)``, a FastAPI request body, a
  ``method.yaml`` the user wrote): an unknown field is an error, so a typo or a field the server
  does not know yet is refused with its name instead of being dropped.
* **Read** (``Model.read(data)``: a response, a binding or ``run.json`` on disk, a runner record,
  an SSE payload): unknown fields are ignored, at every level of nesting, and each ignored field
  is named in a debug log of the ``starforge.contract`` logger. A client, server or runner image
  one version apart therefore reads what the other wrote, as long as no field it needs is gone.

Both modes are pydantic's own: a read validates with ``extra="ignore"`` given at validation time,
which reaches every nested model of that validation, so one class serves both sides and nested
models always follow the outer read; a build costs nothing extra. Missing required fields and
wrong types are errors in both modes. Only when the debug log is on does a read validate a second
time, keeping the unknown fields (``extra="allow"``), to name them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict

from starforge.contract import buildmode

log = logging.getLogger("starforge.contract")


class Contract(BaseModel):
    """Strict when built, lenient when :meth:`read`."""

    model_config = ConfigDict(extra="forbid", defer_build=buildmode.DEFER)

    @classmethod
    def read(cls, data: Any) -> Self:
        """Validate what another process wrote (a dict, or JSON text or bytes), ignoring the
        fields this version does not know, at any depth."""
        if log.isEnabledFor(logging.DEBUG):
            for model, unknown in _unknown_fields(cls._validate(data, "allow")):
                log.debug("%s: ignored unknown fields %s", model, ", ".join(unknown))
        return cls._validate(data, "ignore")

    @classmethod
    def _validate(cls, data: Any, extra: Literal["ignore", "allow"]) -> Self:
        if isinstance(data, str | bytes | bytearray):
            return cls.model_validate_json(data, extra=extra)
        return cls.model_validate(data, extra=extra)


def defer_builds() -> None:
    """Models defined after this call build their validators on first use, not at import: a
    short-lived process (one ``sf`` command) then pays only for the models it uses. Validation
    is unchanged (still strict when built). Only the ``sf`` process calls it, before it imports
    any command: the server builds every model at import, before FastAPI wraps them in its own
    adapters (a deferred model there is built at its first request, with pydantic warnings)."""
    # Subclasses merge their bases' model_config when they are created, so this reaches every
    # model defined from now on; the ones already defined keep their built validators.
    buildmode.DEFER = True
    Contract.model_config["defer_build"] = True


def _unknown_fields(value: Any) -> Iterator[tuple[str, list[str]]]:
    """(model name, its unknown field names) for every model in ``value``, outermost first."""
    if isinstance(value, BaseModel):
        if value.model_extra:
            yield type(value).__name__, list(value.model_extra)
        for name in type(value).model_fields:
            yield from _unknown_fields(getattr(value, name))
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _unknown_fields(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _unknown_fields(item)
