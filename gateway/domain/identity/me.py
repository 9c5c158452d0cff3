"""What `/api/me` and logout say about the caller."""

from __future__ import annotations

from gateway.domain.identity.principal import Principal
from gateway.domain.users.schemas import MeRead
from gateway.state import GatewayState


def describe(principal: Principal) -> MeRead:
    department = principal.department
    quota = department.limits.tokens_per_month if department else None
    return MeRead(
        kind="api_key" if principal.api_key else "user",
        user=principal.user,
        api_key_name=principal.api_key.name if principal.api_key else None,
        department=department.slug if department else None,
        monthly_token_quota=quota,
        csrf_token=principal.session.csrf_token if principal.session else None,
    )


async def after_logout_url(gateway: GatewayState, principal: Principal) -> str:
    """The IdP's end-session page when the user came from it and it has one; else our root."""
    home = gateway.settings.base_url + "/"
    id_token = principal.session.id_token if principal.session else ""
    if gateway.oidc is None or not id_token:
        return home
    return await gateway.oidc.end_session_url(id_token, home) or home
