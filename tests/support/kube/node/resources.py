"""Resource quantities and resourceFieldRef values, as the kubelet reads them from a Pod spec."""

from __future__ import annotations

import decimal
import os
import re
from collections.abc import Mapping
from typing import Any


def parse_quantity(text: str | int | float) -> decimal.Decimal:
    """A Kubernetes quantity (``"64Mi"``, ``"1G"``, ``"500m"``, ``"1e3"``) as a number.

    Raises:
        ValueError: Not a quantity.
    """
    found = re.fullmatch(r"\s*([+-]?[0-9.]+)([eE][+-]?[0-9]+|[A-Za-z]{0,2})\s*", str(text))
    if not found:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = decimal.Decimal(found.group(1)), found.group(2)
    if suffix[:1] in ("e", "E"):
        return number * decimal.Decimal(10) ** int(suffix[1:])
    factors: dict[str, decimal.Decimal | int] = {
        "": 1,
        "n": decimal.Decimal("1e-9"),
        "u": decimal.Decimal("1e-6"),
        "m": decimal.Decimal("1e-3"),
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "P": 10**15,
        "E": 10**18,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
    }
    if suffix not in factors:
        raise ValueError(f"not a quantity: {text!r}")
    return number * factors[suffix]


def resource_field(spec: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    resources = (spec.get("resources") or {}).get(kind) or {}
    value = resources.get(resource)
    if value is None:
        if resource == "memory":
            return str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        return str(os.cpu_count() or 1)
    divisor = parse_quantity(ref.get("divisor", "1"))
    return str(int((parse_quantity(value) / divisor).to_integral_value(decimal.ROUND_CEILING)))
