"""Loading saved configs: one place that checks versions and fills defaults."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, ClassVar, Self, TypeVar

from elmokit.errors import UserError

logger = logging.getLogger(__name__)

ConfigT = TypeVar("ConfigT")


def config_from_dict(cls: type[ConfigT], data: dict[str, Any], what: str = "config") -> ConfigT:
    """Build the frozen dataclass ``cls`` from saved JSON.

    ``data`` must carry a ``format_version`` no newer than ``cls.FORMAT_VERSION``; fields an older
    version lacked take their defaults (each one logged); unknown fields are an error, since a
    field never changes meaning.
    """
    data = dict(data)
    version = data.pop("format_version", None)
    if version is None:
        raise ValueError(f"{what} has no format_version; is this an elmokit {what}?")
    if version > cls.FORMAT_VERSION:  # type: ignore[attr-defined]
        raise ValueError(
            f"{what} format_version {version} is newer than this elmokit understands "
            f"({cls.FORMAT_VERSION}); upgrade elmokit"  # type: ignore[attr-defined]
        )
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise ValueError(f"{what} has unknown fields {unknown}")
    for field in fields:
        if field.name not in data and field.name != "format_version":  # read above, not missing
            logger.info("%s field %r missing (format_version %s); using the default %r", what, field.name, version, field.default)
    return cls(**data)


class SavedConfig:
    """A frozen dataclass config saved as JSON: ``to_dict`` (``format_version`` first), ``from_dict`` (through
    ``config_from_dict``, naming ``WHAT`` in its errors) and ``replace``."""

    FORMAT_VERSION: ClassVar[int]
    WHAT: ClassVar[str] = "config"

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": self.FORMAT_VERSION, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return config_from_dict(cls, data, cls.WHAT)

    def require(self, rule: str, *names: str) -> None:
        """Raise ``UserError`` naming the first of the fields ``names`` that breaks ``rule``: ``">= 0"``, ``">= 1"``
        or ``"finite > 0"``. A field whose default is None passes when left None (not set)."""
        fields = self.__dataclass_fields__  # type: ignore[attr-defined]
        for name in names:
            value = getattr(self, name)
            if value is None and fields[name].default is None:
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not (number and (value > 0 if rule == "finite > 0" else value >= int(rule[3:]))):
                wanted = "a finite number > 0" if rule == "finite > 0" else f"at least {rule[3:]}"
                raise UserError(f"{name} must be {wanted}, got {value!r}")
