"""``resource.Quantity`` and ``intstr.IntOrString`` as the API server reads them.

Only what validation needs: whether a string is a quantity (apimachinery ``ParseQuantity``'s grammar),
its exact value for comparisons (requests against limits, negative amounts), and the integer-or-percent
values that rollout and disruption-budget fields take. Quantities are kept as the strings clients sent.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
QUANTITY_MESSAGE = f"quantities must match the regular expression '{QUANTITY_PATTERN}'"
"""Upstream's ``ErrFormatWrong`` text, which a body with a malformed quantity gets in its 400."""

_NUMBER = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")


def parse(value: Any) -> Decimal | None:
    """The exact value of a quantity (a string, or a JSON number as clients may send), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        return None
    m = _NUMBER.match(value)
    if m is None:
        return None
    number, suffix = m.group(1), m.group(2)
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount * _DECIMAL[suffix]
    exp = _EXPONENT.match(suffix)
    if exp is not None:
        return amount.scaleb(int(exp.group(1)))
    return None


def is_quantity(value: Any) -> bool:
    return parse(value) is not None


def int_or_percent(value: Any) -> tuple[int, bool] | None:
    """An IntOrString holding an integer or ``N%``: (N, is_percent); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value, False
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return int(value[:-1]), True
    return None


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, a percentage of ``total`` rounded."""
    parsed = int_or_percent(value)
    if parsed is None:
        return 0
    amount, percent = parsed
    if not percent:
        return amount
    scaled = Decimal(amount) * total / 100
    return int(scaled.to_integral_value(rounding="ROUND_CEILING" if round_up else "ROUND_FLOOR"))
