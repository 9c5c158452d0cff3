from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway.oidc_provider import RunningProvider, run_provider


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[RunningProvider]:
    """A real oidc-provider on a free 127.0.0.1 port, with two users in different groups."""
    with run_provider() as provider:
        yield provider
