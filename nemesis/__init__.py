"""The nemesis suite (issue 26): real network faults, workloads, a history checker and its report."""
