"""Units shared by every package (defined once; imported, never restated).

``GIB``: one gibibyte, 2**30 bytes (IEC 80000-13 binary prefix), the unit of every "GiB" the project prints or
compares (capacity needs, released bytes). An ``int``: divide by it for a float GiB value.
"""

from __future__ import annotations

GIB = 1 << 30
