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

The mode is carried by pydantic's validation context, which reaches every nested model of one
validation, so one class serves both sides and nested models always follow the outer read.
Missing required fields and wrong types are errors in both modes.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, ValidationInfo, model_validator

log = logging.getLogger("starforge.contract")

_LENIENT = "starforge.lenient"
READ: dict[str, bool] = {_LENIENT: True}  # the validation context of a lenient read


def is_lenient(info: ValidationInfo) -> bool:
    """Whether the validation running now is a lenient read (see :data:`READ`)."""
    return bool(info.context and info.context.get(_LENIENT))


class Contract(BaseModel):
    """Strict when built, lenient when :meth:`read`."""

    model_config = ConfigDict(extra="forbid")

    _known_keys: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        keys: set[str] = set()
        for name, field in cls.model_fields.items():
            keys.add(name)
            if field.alias:
                keys.add(field.alias)
            alias = field.validation_alias
            if isinstance(alias, str):
                keys.add(alias)
            elif isinstance(alias, AliasChoices):
                keys.update(c for c in alias.choices if isinstance(c, str))
        cls._known_keys = frozenset(keys)

    @classmethod
    def read(cls, data: Any) -> Self:
        """Validate what another process wrote (a dict, or JSON text or bytes), ignoring the
        fields this version does not know."""
        if isinstance(data, str | bytes | bytearray):
            return cls.model_validate_json(data, context=READ)
        return cls.model_validate(data, context=READ)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown(cls, data: Any, info: ValidationInfo) -> Any:
        # Only a lenient read drops anything; a build keeps every key so that ``extra="forbid"``
        # names the unknown ones in its error.
        if not isinstance(data, dict) or not is_lenient(info):
            return data
        unknown = [key for key in data if key not in cls._known_keys]
        if not unknown:
            return data
        log.debug("%s: ignored unknown fields %s", cls.__name__, ", ".join(map(str, unknown)))
        return {key: value for key, value in data.items() if key in cls._known_keys}
