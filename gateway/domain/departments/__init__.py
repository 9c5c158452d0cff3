"""The departments domain."""
