"""How released bytes are printed: GiB when something is released, never a negative zero.

What is modelled: released bytes are evidence-accounted (``offloaded_bytes - static_buffer_bytes``,
``analysis.aggregate``). When the offloader's static prefetch buffer is larger than what it
offloaded (one offloaded layer with its buffer rounded up to the allocator's alignment, e.g. 512
bytes) the difference is negative by a few bytes; printed in GiB it reads ``-4.768e-07`` or
``-0.000000``. This module prints it as what it is: nothing released, and the buffer's overhead
in bytes.

What is deliberately not modelled: where the overhead comes from beyond "static buffer larger
than the offloaded bytes" (alignment of the buffer's slots, ``offload.arena``).
"""

from __future__ import annotations

from results_schema.units import GIB


def released_cell(released_bytes: int | float, digits: int = 4) -> str:
    """One table cell for released bytes (``released_bytes`` in bytes; GiB = 2**30 bytes).

    Args:
        released_bytes: offloaded minus static buffer bytes (may be negative).
        digits: significant digits of the GiB figure.

    Returns:
        ``"0.01759"`` (GiB) when positive, ``"0"`` when zero, and when negative
        ``"none (static buffer +512 B over offloaded)"``: nothing is released and the buffer
        costs that many bytes more than the offloaded layers.
    """
    b = int(round(float(released_bytes)))
    if b > 0:
        return f"{b / GIB:.{digits}g}"
    if b == 0:
        return "0"
    return f"none (static buffer +{-b:,} B over offloaded)"
