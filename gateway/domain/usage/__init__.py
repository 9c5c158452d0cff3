"""Usage rollups: API requests summed per day, kept as the audit writer commits them."""
