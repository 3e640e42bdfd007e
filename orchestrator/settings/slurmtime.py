"""Slurm's time formats (sbatch --time): minutes, minutes:seconds, hours:minutes:seconds,
days-hours, days-hours:minutes, days-hours:minutes:seconds."""

from __future__ import annotations

import re
import types
import typing

SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}")
FORMATS = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S, e.g. 90, 30:00, 12:00:00, 1-12, 2-00:00:00"


def is_slurm_time(text: str) -> bool:
    return SLURM_TIME.fullmatch(text) is not None


def slurm_minutes(text: str) -> int:
    """Whole minutes of a Slurm time (seconds round up, as Slurm does); at least 1. ValueError
    for text that is no Slurm time."""
    if not is_slurm_time(text):
        raise ValueError(f"not a Slurm time ({FORMATS})")
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0])[:3]
    else:
        h, m, s = {1: (0, parts[0], 0), 2: (0, parts[0], parts[-1])}.get(len(parts),
                                                                          (*parts[:3],))
    return max(1, int(days or 0) * 1440 + h * 60 + m + (1 if s else 0))


def minutes_value(v: object) -> object:
    """`resources.time_limit_min` as given: a number of minutes stays as it is (the field checks
    it); text is read as a Slurm time."""
    if not isinstance(v, str):
        return v
    text = v.strip()
    if text.isdigit():
        return int(text)
    if is_slurm_time(text):
        return slurm_minutes(text)
    raise ValueError(f"minutes or a Slurm time ({FORMATS})")


def takes_number(annotation: object) -> bool:
    """Whether a field's type is a number (int or float, maybe optional) and not a boolean."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool(args) and bool not in args and any(a in (int, float) for a in args)
    return False
