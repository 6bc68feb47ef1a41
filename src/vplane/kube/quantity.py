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


# -- Quantity values with their format (quota arithmetic, LimitRange messages) ------------------------------

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_NANO = Decimal("1e-9")
_SI_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = {1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


class Quantity:
    """``resource.Quantity``: an exact value and the format it prints in (``String()``'s canonical form).

    Arithmetic keeps the receiver's format unless the receiver is zero (then the other operand's), as
    apimachinery's ``Add``/``Sub`` do, so ``0 + 128Mi`` prints ``128Mi`` and ``1Gi + 512Mi`` ``1536Mi``.
    """

    __slots__ = ("format", "value")

    def __init__(self, value: Decimal | int, fmt: str = DECIMAL_SI) -> None:
        self.value = Decimal(value)
        self.format = fmt

    @classmethod
    def parse(cls, raw: Any) -> Quantity | None:
        """A quantity as ``ParseQuantity`` reads it (finer than nano rounds up), or None."""
        value = parse(raw)
        if value is None:
            return None
        fmt = DECIMAL_SI
        if isinstance(raw, str):
            m = _NUMBER.match(raw)
            suffix = m.group(2) if m else ""
            if suffix in _BINARY:
                fmt = BINARY_SI
            elif _EXPONENT.match(suffix):
                fmt = DECIMAL_EXPONENT
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -9:
            value = value.quantize(_NANO, rounding="ROUND_CEILING")
        return cls(value, fmt)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, other.format if self.value == 0 else self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, other.format if self.value == 0 else self.format)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def milli_value(self) -> int:
        """``MilliValue``: thousandths, rounded up."""
        return int((self.value * 1000).to_integral_value(rounding="ROUND_CEILING"))

    def int_value(self) -> int:
        """``Value``: whole units, rounded up."""
        return int(self.value.to_integral_value(rounding="ROUND_CEILING"))

    def __str__(self) -> str:
        return canonical(self.value, self.format)


def canonical(value: Decimal, fmt: str = DECIMAL_SI) -> str:
    """``Quantity.String()``: the canonical spelling (``1000`` is ``1k``, ``0.5`` is ``500m``, ``1024Mi``
    is ``1Gi``; a binary amount below 1024 or with a fraction prints as decimal)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if fmt == BINARY_SI and magnitude >= 1024 and magnitude == magnitude.to_integral_value():
        number = int(magnitude)
        power = 0
        while power < 6 and number % 1024 == 0:
            number //= 1024
            power += 1
        return f"{sign}{number}{_BINARY_SUFFIX.get(power, '')}"
    _, digits, exponent = magnitude.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if fmt == DECIMAL_EXPONENT or exponent not in _SI_SUFFIX:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{mantissa}{_SI_SUFFIX[exponent]}"
