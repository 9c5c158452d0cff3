"""The traffic tests' real tiny worker, for the end-to-end assistant test."""

from tests.gateway.traffic.conftest import tiny_checkpoint, worker  # noqa: F401  (by name)
