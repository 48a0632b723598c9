"""Figures and tables as text for people: times, byte counts, counts of things, aligned
columns."""


def aligned_columns(rows):
    """Text lines of ``rows`` (lists of strings) in left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def format_time(value, relative=False):
    """A predicted time for people: seconds with a unit, or relative units ("u")."""
    return f"{value:.4g} u" if relative else _format_time(value)


def _format_time(seconds):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(nbytes):
    """Bytes for people: ``1.32 MB``, ``169 PB``."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def counted(count, noun, plural=None):
    """``count`` things in words: ``1 sample``, ``2 samples``, ``0 classes`` (``plural``:
    the noun's plural when it is not the noun and an s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
