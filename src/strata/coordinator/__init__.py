"""Coordinators: the group and transaction state machines that sit below the wire layer."""
