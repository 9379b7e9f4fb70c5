"""The recorder's generic `enter` counted: which calls took the Python path."""

from __future__ import annotations

from typing import Any


def count_enters(rec: Any) -> list[object]:
    """From now on, each site `rec.enter` is called with, in order (the list fills as it runs)."""
    entered: list[object] = []
    generic_enter = rec.enter

    def counting_enter(site: Any) -> Any:
        entered.append(site)
        return generic_enter(site)

    rec.enter = counting_enter
    return entered
