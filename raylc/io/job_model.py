"""The base of every model a job file's keys are read into (the job, its suite, sampling, fit
options, probe and generation settings): unknown keys refused, values frozen, numbers finite,
``true`` / ``false`` refused where a number belongs (pydantic's lax mode reads them as 1 / 0),
integers within 64 bits (numpy and Ray take them as C longs), and every time a run waits (a key
ending in ``_s`` or ``_seconds``) at most :data:`MAX_WAIT_S` (a larger one overflows the clocks
it is passed to, after the run has started)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

#: The longest wait a job may set, in seconds: a week.
MAX_WAIT_S = 7 * 24 * 3600.0
_INT64 = 2 ** 63


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

    @field_validator("*", mode="after")
    @classmethod
    def _within_limits(cls, value: Any, info: ValidationInfo) -> Any:
        numbers = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, int) and not isinstance(v, bool) and not -_INT64 <= v < _INT64 for v in numbers):
            raise PydanticCustomError("int64", "must be below 2^63 in size")
        name = info.field_name or ""
        if (name.endswith(("_s", "_seconds")) and isinstance(value, (int, float)) and not isinstance(value, bool)
                and value > MAX_WAIT_S):
            raise PydanticCustomError("wait", f"at most {MAX_WAIT_S:.0f} s (a week)")
        return value
