"""The base of every config section: unknown keys are errors, and a YAML boolean is never a
number."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from orchestrator.settings.slurmtime import takes_number

__all__ = ["Section"]


class Section(BaseModel):
    """Base of the config sections: unknown keys are errors, and a YAML boolean is never a
    number (pydantic would read `time_limit_min: yes` as 1 minute)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, v: object, info: ValidationInfo) -> object:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(v, bool) and field is not None and takes_number(field.annotation):
            raise ValueError(f"a number is needed, not the boolean {str(v).lower()} (YAML reads "
                             "yes/no/on/off/true/false as booleans)")
        return v
