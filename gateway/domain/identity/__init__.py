"""The identity domain."""
