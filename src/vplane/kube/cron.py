"""Cron schedules as CronJobs accept them (robfig/cron v3 ``ParseStandard``, which upstream uses).

Only the parse: whether a schedule is valid, with the parser's own error text (upstream puts it in the
422). Five fields (minute, hour, day of month, month, day of week), ``*``, ``?``, lists, ranges, steps,
month and weekday names, and the ``@yearly``/``@monthly``/``@weekly``/``@daily``/``@hourly``/``@every``
descriptors.
"""

from __future__ import annotations

import re

_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("dom", 1, 31, {}),
    (
        "month",
        1,
        12,
        {
            m: i + 1
            for i, m in enumerate(
                ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
            )
        },
    ),
    ("dow", 0, 6, {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}),
)
_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def parse_error(schedule: str) -> str | None:
    """None for a valid schedule, else the error robfig/cron reports."""
    spec = schedule.strip()
    if not spec:
        return "empty spec string"
    if spec.startswith(("TZ=", "CRON_TZ=")):
        _, _, rest = spec.partition(" ")
        spec = rest.strip()
    if spec.startswith("@"):
        if spec in _DESCRIPTORS:
            return None
        if spec.startswith("@every "):
            duration = spec[len("@every ") :]
            if _DURATION.match(duration):
                return None
            return f'failed to parse duration {spec}: time: invalid duration "{duration}"'
        return f"unrecognized descriptor: {spec}"
    fields = spec.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]"
    for text, (_, low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in text.split(","):
            error = _part_error(part, low, high, names)
            if error is not None:
                return error
    return None


def _number(text: str, names: dict[str, int]) -> tuple[int | None, str | None]:
    lowered = text.lower()
    if lowered in names:
        return names[lowered], None
    if text.isdigit():
        return int(text), None
    return None, f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax'


def _part_error(part: str, low: int, high: int, names: dict[str, int]) -> str | None:
    range_text, _, step_text = part.partition("/")
    if part.count("/") > 1:
        return f"too many slashes: {part}"
    if range_text in ("*", "?"):
        start, end = low, high
    else:
        first, _, last = range_text.partition("-")
        if range_text.count("-") > 1:
            return f"too many hyphens: {part}"
        start_value, error = _number(first, names)
        if error is not None or start_value is None:
            return error
        start = start_value
        end = start
        if last:
            end_value, error = _number(last, names)
            if error is not None or end_value is None:
                return error
            end = end_value
        elif step_text:
            end = high
    if step_text:
        step, error = _number(step_text, {})
        if error is not None or step is None:
            return error
        if step == 0:
            return f"step of range should be a positive number: {part}"
    if start < low:
        return f"beginning of range ({start}) below minimum ({low}): {part}"
    if end > high:
        return f"end of range ({end}) above maximum ({high}): {part}"
    if start > end:
        return f"beginning of range ({start}) beyond end of range ({end}): {part}"
    return None
