"""The base of every model a job file's keys are read into (the job, its suite, sampling, fit
options, probe and generation settings): unknown keys refused, values frozen, numbers finite,
and ``true`` / ``false`` refused where a number belongs (pydantic's lax mode reads them as 1 / 0)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


def _kinds(annotation: Any) -> set[Any]:
    """The plain types inside a field's type (through Optional, unions, ``Annotated``, lists);
    a nested model is its own (it checks its own fields)."""
    args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
    if not args or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return {annotation}
    return set().union(*(_kinds(a) for a in args))


def _has_bool(value: Any) -> bool:
    """A bool, or a list or tuple holding one (``lengths: [true, 8]``)."""
    return isinstance(value, bool) or (isinstance(value, (list, tuple)) and any(isinstance(v, bool) for v in value))


class JobModel(BaseModel):
    """A section of a job file (see the module docstring). ``serialize_by_alias``: a field
    renamed in Python keeps the key users write in every dump (job.yaml, fingerprints)."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _has_bool(value):
            kinds = _kinds(field.annotation)
            if kinds & {int, float} and not kinds & {bool, Any}:
                raise PydanticCustomError("bool_for_number", "expected {what}, not true or false",
                                          {"what": "a number" if isinstance(value, bool) else "numbers"})
        return value
