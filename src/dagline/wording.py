"""How messages count things: `1 run`, `2 runs`, `0 tries`, with the noun in its singular or plural."""

from __future__ import annotations


def counted(number: int, singular: str, plural: str | None = None) -> str:
    """`1 slot`, `2 slots`; `plural` where adding an `s` is wrong (`try`: `tries`)."""
    return f"{number} {singular if number == 1 else (plural or singular + 's')}"
