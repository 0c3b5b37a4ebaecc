"""SillyTavern's ``send_date`` values read as seconds since 1970.

SillyTavern has written a message's date in several forms over its versions: JavaScript
milliseconds, a humanized local time ("June 19, 2023 2:20pm"), its own
"2023-06-19 @14h 20m 05s" and ISO 8601 with or without a zone.  Used by
:mod:`halo_weave.exchange.foreign_import`.
"""

from __future__ import annotations

import calendar
import re
import time
from typing import Any

_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july",
                                       "august", "september", "october", "november", "december"), 1)}


def parse_st_date(value: Any) -> float | None:
    """Seconds since 1970 from any ``send_date`` SillyTavern has written (None if unknown).

    Local times (the humanized and "June 19, 2023 2:20pm" forms) are read as local time.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit()):
        stamp = float(value) / 1000.0  # JavaScript milliseconds
        return stamp if 0 < stamp < 1e11 else None
    if not isinstance(value, str):
        return None
    s = value.strip()
    m = re.fullmatch(r"(\w+)\s(\d{1,2}),\s(\d{4})\s(\d{1,2}):(\d{1,2})\s?(am|pm)", s, re.IGNORECASE)
    if m and m.group(1).lower() in _MONTHS:
        hour = int(m.group(4)) % 12 + (12 if m.group(6).lower() == "pm" else 0)
        return _local(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)), hour, int(m.group(5)), 0)
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})\s?@(\d{1,2})h\s?(\d{1,2})m\s?(\d{1,2})s(?:\s?(\d{1,3})ms)?", s)
    if m:
        return _local(*(int(g) for g in m.groups()[:6]))
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?", s)
    if m:
        parts = [int(g) for g in m.groups()[:6]]
        zone = m.group(7)
        if zone is None:
            return _local(*parts)
        stamp = calendar.timegm((*parts, 0, 0, 0))
        if zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            stamp -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        return float(stamp)
    return None


def _local(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float | None:
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
