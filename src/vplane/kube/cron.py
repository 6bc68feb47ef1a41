"""Cron schedules as CronJobs read them (robfig/cron v3 ``ParseStandard``, which upstream uses).

:func:`parse` turns a schedule into a :class:`SpecSchedule` (five fields as bit sets, as robfig keeps
them) or an :class:`EverySchedule` (``@every <duration>``); :func:`parse_error` is what validation needs,
the parser's own error text (upstream puts it in the 422). Five fields (minute, hour, day of month, month,
day of week), ``*``, ``?``, lists, ranges, steps, month and weekday names, the ``@yearly``/``@monthly``/
``@weekly``/``@daily``/``@hourly``/``@every`` descriptors and a ``TZ=``/``CRON_TZ=`` prefix.

:func:`next_time` is robfig's ``Next``, field by field on Unix seconds, with Go's rules for wall-clock
times that a zone skips or repeats: a daily 02:30 is skipped on the night clocks spring forward and runs
twice on the night they fall back; a midnight that does not exist moves to the hour after. Written here,
not taken from croniter, because those rules (and robfig's star-bit rule for ``*/n``, its five-year
search limit that makes ``0 0 31 2 *`` a schedule without times) are what a CronJob's job names and
missed-schedule counts depend on, and croniter's differ.
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
import zoneinfo
from dataclasses import dataclass

_STAR = 1 << 63
"""Set when a field was written ``*`` or ``?`` (robfig's ``starBit``): day of month and day of week
combine with AND when either has it, with OR otherwise."""

_MONTHS = {m: i + 1 for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}  # fmt: skip
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),  # minute
    (0, 23, {}),  # hour
    (1, 31, {}),  # day of month
    (1, 12, _MONTHS),
    (0, 6, _DAYS),  # day of week
)
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_YEAR_LIMIT = 5
"""robfig gives up (the zero time) when no time matches within five years of the start."""


class CronError(ValueError):
    """A schedule robfig/cron refuses; the message is the parser's."""


@dataclass(frozen=True)
class SpecSchedule:
    minute: int
    hour: int
    dom: int
    month: int
    dow: int
    zone: datetime.tzinfo | None = None
    """From a ``TZ=`` prefix; None means the zone :func:`next_time` is given (robfig's ``time.Local``)."""


@dataclass(frozen=True)
class EverySchedule:
    delay: float
    """Whole seconds, at least one (robfig's ``ConstantDelaySchedule``)."""


Schedule = SpecSchedule | EverySchedule


def _bits(low: int, high: int, step: int) -> int:
    bits = 0
    for i in range(low, high + 1, step):
        bits |= 1 << i
    return bits


def _all(low: int, high: int) -> int:
    return _bits(low, high, 1) | _STAR


_DESCRIPTORS: dict[str, tuple[int, int, int, int, int]] = {
    "@yearly": (1, 1, 1 << 1, 1 << 1, _all(0, 6)),
    "@annually": (1, 1, 1 << 1, 1 << 1, _all(0, 6)),
    "@monthly": (1, 1, 1 << 1, _all(1, 12), _all(0, 6)),
    "@weekly": (1, 1, _all(1, 31), _all(1, 12), 1 << 0),
    "@daily": (1, 1, _all(1, 31), _all(1, 12), _all(0, 6)),
    "@midnight": (1, 1, _all(1, 31), _all(1, 12), _all(0, 6)),
    "@hourly": (1, _all(0, 23), _all(1, 31), _all(1, 12), _all(0, 6)),
}


def load_zone(name: str) -> datetime.tzinfo:
    """Go's ``time.LoadLocation``: ``""`` and ``UTC`` are UTC; ``Local`` is refused here (no process zone in
    pure code); anything else from the zone database. Raises :class:`CronError` with Go's text."""
    if name in ("", "UTC"):
        return datetime.UTC
    if name.strip() != name or name == "Local":
        raise CronError(f"unknown time zone {name}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown time zone {name}") from None


def parse(schedule: str) -> Schedule:
    """``cron.ParseStandard``; raises :class:`CronError` with robfig's message."""
    spec = schedule.strip()
    if not spec:
        raise CronError("empty spec string")
    zone: datetime.tzinfo | None = None
    if spec.startswith(("TZ=", "CRON_TZ=")):
        head, _, rest = spec.partition(" ")
        name = head.partition("=")[2]
        try:
            zone = load_zone(name)
        except CronError as exc:
            raise CronError(f"provided bad location {name}: {exc}") from None
        spec = rest.strip()
    if spec.startswith("@"):
        if spec in _DESCRIPTORS:
            return SpecSchedule(*_DESCRIPTORS[spec], zone=zone)
        if spec.startswith("@every "):
            duration = spec[len("@every ") :]
            if not _DURATION.match(duration):
                raise CronError(f'failed to parse duration {spec}: time: invalid duration "{duration}"')
            return EverySchedule(_every_delay(duration))
        raise CronError(f"unrecognized descriptor: {spec}")
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    values = [
        _field_bits(text, low, high, names) for text, (low, high, names) in zip(fields, _FIELDS, strict=True)
    ]
    minute, hour, dom, month, dow = values
    return SpecSchedule(minute, hour, dom, month, dow, zone=zone)


def parse_error(schedule: str) -> str | None:
    """None for a valid schedule, else the error robfig/cron reports."""
    try:
        parse(schedule)
    except CronError as exc:
        return str(exc)
    return None


def _every_delay(duration: str) -> float:
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(duration))
    return float(max(math.floor(seconds), 1))  # under a second rounds up to one; fractions are truncated


def _atoi(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise CronError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax')
    value = int(text)
    if value < 0:
        raise CronError(f"negative number ({value}) not allowed: {text}")
    return value


def _int_or_name(text: str, names: dict[str, int]) -> int:
    named = names.get(text.lower())
    return named if named is not None else _atoi(text)


def _field_bits(field: str, low: int, high: int, names: dict[str, int]) -> int:
    bits = 0
    for expr in (part for part in field.split(",") if part):
        bits |= _range_bits(expr, low, high, names)
    return bits


def _range_bits(expr: str, low: int, high: int, names: dict[str, int]) -> int:
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    extra = 0
    if low_and_high[0] in ("*", "?"):
        start, end, extra = low, high, _STAR
    else:
        start = _int_or_name(low_and_high[0], names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], names)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _atoi(range_and_step[1])
        if len(low_and_high) == 1:
            end = high  # "N/step" means "N-max/step"
        if step > 1:
            extra = 0
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < low:
        raise CronError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise CronError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")
    return _bits(start, end, step) | extra


# -- Next -------------------------------------------------------------------------------------------------


def _local(ts: float, zone: datetime.tzinfo) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, zone)


def _offset(ts: float, zone: datetime.tzinfo) -> float:
    offset = _local(ts, zone).utcoffset()
    return offset.total_seconds() if offset is not None else 0.0


def go_date(year: int, month: int, day: int, hour: int, zone: datetime.tzinfo) -> float:
    """Go's ``time.Date(year, month, day, hour, 0, 0, 0, zone)`` as Unix seconds: out-of-range months and
    days roll over, and a wall time the zone skips or repeats resolves as Go resolves it (the offset in
    force at that wall time read as UTC, checked once against the result)."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    base = datetime.datetime(year, month, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        days=day - 1, hours=hour
    )
    wall = float(calendar.timegm(base.timetuple()))
    guess = _offset(wall, zone)
    return wall - _offset(wall - guess, zone)


def _day_matches(s: SpecSchedule, t: datetime.datetime) -> bool:
    dom_match = bool(1 << t.day & s.dom)
    dow_match = bool(1 << ((t.weekday() + 1) % 7) & s.dow)
    if s.dom & _STAR or s.dow & _STAR:
        return dom_match and dow_match
    return dom_match or dow_match


def next_time(schedule: Schedule, after: float, default_zone: datetime.tzinfo = datetime.UTC) -> float | None:
    """``Schedule.Next``: the first activation strictly after ``after`` (Unix seconds), or None when there
    is none within five years (robfig's zero time)."""
    if isinstance(schedule, EverySchedule):
        return math.floor(after) + schedule.delay
    s = schedule
    zone = s.zone or default_zone
    t = float(math.floor(after) + 1)  # the upcoming whole second
    added = False
    year_limit = _local(t, zone).year + _YEAR_LIMIT
    while True:  # robfig's WRAP label
        local = _local(t, zone)
        if local.year > year_limit:
            return None
        wrapped = False
        while not (1 << local.month & s.month):
            if not added:
                added = True
                t = go_date(local.year, local.month, 1, 0, zone)
                local = _local(t, zone)
            t = go_date(local.year, local.month + 1, local.day, local.hour, zone)
            local = _local(t, zone)
            if local.month == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not _day_matches(s, local):
            if not added:
                added = True
                t = go_date(local.year, local.month, local.day, 0, zone)
                local = _local(t, zone)
            t = go_date(local.year, local.month, local.day + 1, local.hour, zone)
            local = _local(t, zone)
            if local.hour != 0:  # a midnight the zone skips or repeats
                t += (24 - local.hour) * 3600 if local.hour > 12 else -local.hour * 3600
                local = _local(t, zone)
            if local.day == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not (1 << local.hour & s.hour):
            if not added:
                added = True
                t = go_date(local.year, local.month, local.day, local.hour, zone)
            t += 3600
            local = _local(t, zone)
            if local.hour == 0:
                wrapped = True
                break
        if wrapped:
            continue
        while not (1 << local.minute & s.minute):
            if not added:
                added = True
                t -= t % 60
            t += 60
            local = _local(t, zone)
            if local.minute == 0:
                wrapped = True
                break
        if wrapped:
            continue
        if local.second != 0:  # a five-field schedule fires at second 0: on to the next minute, and wrap
            added = True
            t += 60 - local.second
            continue
        return t
