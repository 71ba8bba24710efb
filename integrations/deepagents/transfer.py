"""Moved to the core (:mod:`filegate.activities.transfer`); the name stays importable here."""

from __future__ import annotations

from filegate.activities.transfer import TransferActivities

__all__ = ["TransferActivities"]
