"""Kubernetes resource quantities as exact numbers, to compare ``1Gi`` with ``1024Mi``.

The apiserver rewrites quantities in canonical form (``2000m`` -> ``2``, ``0.5`` -> ``500m``),
so a rendered value and the stored one are compared by value, not by spelling.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)$")


def parse(value: str | int | float) -> Decimal | None:
    """The quantity's value; None when ``value`` is not a quantity."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return None


def equal(a: object, b: object) -> bool:
    """Whether two quantities are the same amount (or, if either is not one, equal as given)."""
    if isinstance(a, str | int | float) and isinstance(b, str | int | float):
        pa, pb = parse(a), parse(b)
        if pa is not None and pb is not None:
            return pa == pb
    return a == b
