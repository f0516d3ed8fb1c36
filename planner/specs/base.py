"""The base of every spec: immutable pydantic models that reject unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator


class Spec(BaseModel):
    """Base of every spec: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: object) -> object:
        """A number field given ``true``/``false`` is an error, not 1/0 (pydantic's lax mode
        would read ``layers: true`` as one block)."""
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(name)
                if isinstance(value, bool) and _is_numeric(field.annotation):
                    raise ValueError(f"{name} = {value!r}: a number, not true/false")
        return data


def _is_numeric(annotation: object) -> bool:
    """Whether a field's type is int or float, optionally with None."""
    return annotation in (int, float, int | None, float | None)
