"""OIDC sign-in with authlib: authorization code + PKCE (S256), state, nonce, JWKS check."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from gateway.domain.identity.pending_login import PendingLogin
from gateway.settings import Settings

ALGORITHMS = ["RS256", "PS256", "ES256", "EdDSA"]


class IdentityProviderUnavailable(ConnectionError):
    """The IdP could not be reached or answered nonsense (503, not a refused login)."""


class OidcError(PermissionError):
    """A login that must be refused; the message says why, without secrets."""


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None


class OidcClient:
    """One per process; caches the discovery document and the provider's keys."""

    def __init__(self, settings: Settings) -> None:
        self.issuer = settings.oidc_issuer.rstrip("/")
        self.client_id = settings.oidc_client_id
        self.client_secret = settings.oidc_client_secret
        self.scopes = " ".join(settings.oidc_scopes.split())
        self.redirect_uri = settings.base_url + "/auth/callback"
        self._metadata: ProviderMetadata | None = None
        self._keys: KeySet | None = None

    async def metadata(self) -> ProviderMetadata:
        if self._metadata is None:
            url = self.issuer + "/.well-known/openid-configuration"
            document = await self._fetch_json(url)
            if document.get("issuer", "").rstrip("/") != self.issuer:
                raise OidcError("the discovery document names a different issuer")
            self._metadata = ProviderMetadata(
                document["issuer"],
                document["authorization_endpoint"],
                document["token_endpoint"],
                document["jwks_uri"],
                document.get("end_session_endpoint"),
            )
        return self._metadata

    async def keys(self, refresh: bool = False) -> KeySet:
        if self._keys is None or refresh:
            document = await self._fetch_json((await self.metadata()).jwks_uri)
            self._keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        return self._keys

    async def _fetch_json(self, url: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                document: dict[str, Any] = (await http.get(url)).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise IdentityProviderUnavailable(
                f"the identity provider at {self.issuer} did not answer ({type(exc).__name__}); "
                "try again later, or sign in with the break-glass admin account"
            ) from exc
        return document

    def _oauth(self) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            self.client_id,
            self.client_secret,
            scope=self.scopes,
            redirect_uri=self.redirect_uri,
            code_challenge_method="S256",
            timeout=10,
        )

    async def authorization_url(self, pending: PendingLogin) -> str:
        async with self._oauth() as oauth:
            url, _ = oauth.create_authorization_url(
                (await self.metadata()).authorization_endpoint,
                state=pending.state,
                nonce=pending.nonce,
                code_verifier=pending.code_verifier,
            )
        return str(url)

    async def finish(self, pending: PendingLogin | None, state: str, code: str) -> dict[str, Any]:
        """Check ``state``, exchange ``code`` with the PKCE verifier, verify the ID token."""
        # As bytes: compare_digest refuses str that is not ASCII, and ``state`` is the client's.
        sent = state.encode("utf-8", "surrogatepass")
        if pending is None or not hmac.compare_digest(pending.state.encode(), sent):
            raise OidcError("login state does not match; start the login again")
        async with self._oauth() as oauth:
            try:
                token = await oauth.fetch_token(
                    (await self.metadata()).token_endpoint,
                    code=code,
                    code_verifier=pending.code_verifier,
                )
            except Exception as exc:  # authlib raises several types; all mean "refused"
                raise OidcError("the identity provider refused the login code") from exc
        id_token = token.get("id_token")
        if not id_token:
            raise OidcError("the identity provider sent no ID token")
        claims = await self.verify_id_token(id_token, pending.nonce)
        return {**claims, "_id_token": id_token}

    async def verify_id_token(self, id_token: str, nonce: str) -> dict[str, Any]:
        """Signature against the JWKS (refetched once for an unknown key), iss, aud, exp, nonce."""
        try:
            try:
                decoded = jwt.decode(id_token, await self.keys(), algorithms=ALGORITHMS)
            except (ValueError, JoseError):
                decoded = jwt.decode(id_token, await self.keys(refresh=True), algorithms=ALGORITHMS)
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": (await self.metadata()).issuer},
                aud={"essential": True, "value": self.client_id},
                sub={"essential": True},
                exp={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(decoded.claims)
        except (ValueError, JoseError) as exc:
            raise OidcError(f"the ID token is not valid: {type(exc).__name__}") from exc
        return dict(decoded.claims)

    async def end_session_url(self, id_token: str, after: str) -> str | None:
        endpoint = (await self.metadata()).end_session_endpoint
        if not endpoint:
            return None
        query = {"id_token_hint": id_token, "post_logout_redirect_uri": after}
        return f"{endpoint}?{urlencode({**query, 'client_id': self.client_id})}"
