"""A table that fits the terminal by dropping whole columns (or, narrower still, lines of whole
values), least needed first, instead of cutting
every cell to an ellipsis ("CANCE…", "20->…"): what is shown is shown whole. Pure."""

from __future__ import annotations

from collections.abc import Sequence, Sized

from rich.table import Table
from rich.text import Text

PADDING = 3  # rich's box: a separator and one space each side


def kept_columns(headers: Sequence[str], rows: Sequence[Sequence[Sized]], width: int | None,
                 drop_order: Sequence[str]) -> list[int]:
    """Indices of the columns to show within `width` (None: all), dropping `drop_order` in turn
    until the natural widths fit; the columns not named in it are always kept."""
    natural = [max([len(h), *(len(r[i]) for r in rows)]) + PADDING for i, h in enumerate(headers)]
    kept = list(range(len(headers)))
    if width is None:
        return kept
    for name in drop_order:
        if sum(natural[i] for i in kept) + 1 <= width:
            break
        if name in headers:
            kept.remove(headers.index(name))
    return kept


def fits(headers: Sequence[str], rows: Sequence[Sequence[Sized]], kept: Sequence[int],
         width: int | None, minimum: dict[str, int] | None = None) -> bool:
    """Whether the `kept` columns fit `width` at their natural widths, or the `minimum` a column
    is given (None: any width)."""
    natural = [max([len(h), (minimum or {}).get(h, 0), *(len(r[i]) for r in rows)]) + PADDING
               for i, h in enumerate(headers)]
    return width is None or sum(natural[i] for i in kept) + 1 <= width


def as_lines(t: Table, headers: Sequence[str], rows: Sequence[Sequence[Text]],
             always: Sequence[str]) -> Table:
    """The rows as wrapped lines of `header value` pairs, for a terminal too narrow for their
    columns: every value whole, the line wrapped between pairs (`always`: the columns shown even
    when `-`)."""
    t.add_column("segments", overflow="fold")
    t.show_lines = True
    for r in rows:
        t.add_row(Text("  ".join(f"{h} {v}" for h, v in zip(headers, r, strict=True)
                                 if str(v) != "-" or h in always)))
    return t
