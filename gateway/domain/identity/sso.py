"""The two halves of an OIDC login, kept out of the controller."""

from __future__ import annotations

from litestar.datastructures import Cookie
from litestar.exceptions import NotFoundException
from litestar.response import Redirect
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import User
from gateway.domain.identity import pending_login
from gateway.domain.identity.oidc import OidcClient
from gateway.domain.identity.pending_login import LOGIN_COOKIE, LOGIN_TTL_SECONDS, PendingLogin
from gateway.domain.identity.principal import SESSION_COOKIE
from gateway.domain.identity.provisioning import provision_user
from gateway.state import GatewayState


def _client(gateway: GatewayState) -> OidcClient:
    if gateway.oidc is None:
        raise NotFoundException("single sign-on is not configured")
    return gateway.oidc


def _cookie(gateway: GatewayState, key: str, value: str, max_age: int) -> Cookie:
    return Cookie(
        key=key,
        value=value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="lax",  # Lax: the cookie still rides the IdP's top-level redirect back
        secure=gateway.secure_cookies,
    )


async def begin(gateway: GatewayState) -> Redirect:
    pending = PendingLogin.new()
    url = await _client(gateway).authorization_url(pending)
    value = pending_login.encode(gateway.secret_key, pending)
    return Redirect(url, cookies=[_cookie(gateway, LOGIN_COOKIE, value, LOGIN_TTL_SECONDS)])


async def complete(
    gateway: GatewayState, db: AsyncSession, cookie: str, state: str, code: str
) -> tuple[Redirect, User]:
    """The browser back from the IdP: a session for the user, and who signed in."""
    client = _client(gateway)
    pending = pending_login.decode(gateway.secret_key, cookie)
    claims = await client.finish(pending, state, code)
    settings = gateway.settings
    user = await provision_user(
        db, client.issuer, claims, settings.oidc_groups_claim, settings.oidc_admin_group
    )
    await db.commit()  # the user must exist before a session can refer to it
    session_id, _ = await gateway.sessions.create(user.id, claims["_id_token"])
    max_age = settings.session_absolute_hours * 3600
    redirect = Redirect(
        settings.base_url + "/",
        cookies=[
            _cookie(gateway, SESSION_COOKIE, session_id, max_age),
            _cookie(gateway, LOGIN_COOKIE, "", 0),
        ],
    )
    return redirect, user
