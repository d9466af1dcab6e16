"""argparse ``type`` functions the tools share. Standard library only: the ``strata`` parser imports this module
when it is built, before any command runs."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    """Counts and durations that may be 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value
