"""Sign-in with the local break-glass account, sign-out, and who-am-I."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.exceptions import TooManyRequestsException
from litestar.params import FromQuery, JSONBody, QueryParameter
from litestar.response import Redirect
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit import events
from gateway.domain.fields import Email, Password
from gateway.domain.identity import me, sso
from gateway.domain.identity.guards import require_json, require_user, require_user_or_key
from gateway.domain.identity.pending_login import LOGIN_COOKIE
from gateway.domain.identity.principal import SESSION_COOKIE, Principal
from gateway.domain.users.schemas import MeRead
from gateway.domain.users.service import UserService
from gateway.state import GatewayState


class LocalLogin(msgspec.Struct, forbid_unknown_fields=True):
    email: Email
    password: Password


class SignedIn(msgspec.Struct):
    csrf_token: str


class SignInMethods(msgspec.Struct):
    """How people may sign in here: the web app shows the SSO button only when it works."""

    sso: bool
    local: bool = True


class SignedOut(msgspec.Struct):
    # Where the browser goes next: the IdP's end-session page, or the gateway's root.
    redirect: str


def session_cookie(state: GatewayState, value: str, max_age: int | None) -> Cookie:
    return Cookie(
        key=SESSION_COOKIE,
        value=value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="lax",
        secure=state.secure_cookies,
    )


class IdentityController(Controller):
    @post("/auth/local/login", guards=[require_json], status_code=200)
    async def local_login(
        self,
        request: Request,
        data: JSONBody[LocalLogin],
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
    ) -> Response[SignedIn]:
        users, address = UserService(db), request.client.host if request.client else ""
        try:
            async with gateway.login_throttle.attempt(data.email, address):
                user = await users.check_local_login(gateway.hasher, data.email, data.password)
        except (PermissionError, TooManyRequestsException) as refused:
            throttled = isinstance(refused, TooManyRequestsException)
            events.record_login_failed(
                request,
                gateway.audit,
                data.email,
                429 if throttled else 401,
                method="local",
                reason="throttled" if throttled else "password",
            )
            raise
        events.record_auth_event(request, gateway.audit, "auth.login", user=user, method="local")
        session_id, session = await gateway.sessions.create(user.id)
        max_age = gateway.settings.session_absolute_hours * 3600
        return Response(
            SignedIn(session.csrf_token), cookies=[session_cookie(gateway, session_id, max_age)]
        )

    @post("/auth/logout", guards=[require_user], status_code=200)
    async def logout(
        self,
        request: Request,
        principal: NamedDependency[Principal],
        gateway: NamedDependency[GatewayState],
    ) -> Response[SignedOut]:
        await gateway.sessions.delete(principal.session_id)
        events.record_auth_event(request, gateway.audit, "auth.logout")
        return Response(
            SignedOut(redirect=await me.after_logout_url(gateway, principal)),
            cookies=[session_cookie(gateway, "", 0)],
        )

    @get("/api/me", guards=[require_user_or_key])
    async def whoami(self, principal: NamedDependency[Principal]) -> MeRead:
        return me.describe(principal)


class OidcController(Controller):
    """`/auth/login` sends the browser to the IdP; `/auth/callback` brings it back signed in."""

    @get("/auth/methods", sync_to_thread=False)
    def methods(self, gateway: NamedDependency[GatewayState]) -> SignInMethods:
        return SignInMethods(sso=gateway.oidc is not None)

    @get("/auth/login")
    async def login(self, gateway: NamedDependency[GatewayState]) -> Redirect:
        return await sso.begin(gateway)

    @get("/auth/callback")
    async def callback(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        code: FromQuery[str],
        # The query's `state`, renamed: `state` is a reserved kwarg in Litestar.
        login_state: Annotated[str, QueryParameter(name="state")],
    ) -> Redirect:
        cookie = request.cookies.get(LOGIN_COOKIE, "")
        try:
            redirect, user = await sso.complete(gateway, db, cookie, login_state, code)
        except Exception as exc:
            events.record_login_failed(
                request, gateway.audit, "", method="oidc", error=type(exc).__name__
            )
            raise
        events.record_auth_event(request, gateway.audit, "auth.login", user=user, method="oidc")
        return redirect
