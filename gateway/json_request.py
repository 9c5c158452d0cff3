"""The request class of the gateway's Litestar routes: JSON nested too deep is a 400.

msgspec decodes recursively and raises RecursionError (not a DecodeError) for a body nested
about a thousand levels deep; Litestar would let that through as a 500. No body the gateway
accepts nests more than a few levels, so such a body is the client's mistake.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.exceptions import ClientException

TOO_DEEP = "the request body is nested too deeply"


class GatewayRequest(Request[Any, Any, Any]):
    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError:
            raise ClientException(TOO_DEEP) from None
