"""What the running gateway holds: built once from settings in create_app, closed on shutdown.

`GatewayState` (``app.state.gateway``) is the one owner of what every part of the gateway
shares: the settings, the database, Redis, sessions, the key cache, the config generation,
the audit writer (admin actions, sign-ins and the proxy all write to it), and the
department assistants' cache (the proxy's lookups) and prefix warmer (the admin API asks it
to sync; it is handed the worker pool by create_app, once `Traffic` is built). The proxy's
own parts (worker pool, limiter, metrics, HTTP client) are `Traffic`'s
(gateway/domain/proxy/traffic.py, ``app.state.traffic``); neither holds the other's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from argon2 import PasswordHasher
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.config_generation import ConfigGeneration
from gateway.db.engine import create_engine, session_factory
from gateway.domain.assistants.cache import AssistantCache
from gateway.domain.assistants.warming import PrefixWarmer
from gateway.domain.audit.console_verify import ChainVerification
from gateway.domain.audit.retention import retention_loop
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.identity.key_cache import KeySnapshots
from gateway.domain.identity.login_throttle import LoginThrottle, build_login_throttle
from gateway.domain.identity.oidc import OidcClient
from gateway.domain.identity.passwords import password_hasher
from gateway.domain.identity.session_store import (
    DatabaseSessionStore,
    RedisSessionStore,
    SessionLifetimes,
    SessionStore,
)
from gateway.secret_store import resolve_secret_key
from gateway.settings import Settings


@dataclass(slots=True)
class GatewayState:
    settings: Settings
    secret_key: str
    engine: AsyncEngine
    db: async_sessionmaker[AsyncSession]
    sessions: SessionStore
    hasher: PasswordHasher
    audit: AuditWriter
    login_throttle: LoginThrottle
    redis: Redis | None = None
    oidc: OidcClient | None = None
    key_snapshots: KeySnapshots = field(default_factory=KeySnapshots)
    generation: ConfigGeneration = field(init=False)
    # The console's chain check (POST /api/admin/audit/verify): one walk at a time.
    verification: ChainVerification = field(init=False)
    retention: asyncio.Task[None] | None = None  # the audit retention job, when configured
    # Each department's assistants, for the proxy (a few seconds' cache; assistants/cache.py).
    assistants: AssistantCache = field(init=False)
    # Pins assistants' system messages in the workers' prefix caches (assistants/warming.py).
    warmer: PrefixWarmer = field(init=False)

    def __post_init__(self) -> None:
        self.generation = ConfigGeneration(self.redis, self.settings.data_dir)
        self.verification = ChainVerification(self.db, self.audit.seal)
        grace = float(self.settings.key_outage_grace_seconds)
        self.assistants = AssistantCache(self.db, outage_grace_s=grace)
        self.warmer = PrefixWarmer(self.db)

    @classmethod
    def build(cls, settings: Settings) -> GatewayState:
        engine = create_engine(settings.effective_database_url)
        factory = session_factory(engine)
        lifetimes = SessionLifetimes(
            idle=timedelta(minutes=settings.session_idle_minutes),
            absolute=timedelta(hours=settings.session_absolute_hours),
        )
        redis = Redis.from_url(settings.redis_url) if settings.redis_url else None
        sessions: SessionStore = (
            RedisSessionStore(redis, lifetimes)
            if redis
            else DatabaseSessionStore(factory, lifetimes)
        )
        secret_key = resolve_secret_key(settings)
        seal = ChainSeal.build(secret_key, settings.audit_head_path)
        return cls(
            settings,
            secret_key,
            engine,
            factory,
            sessions,
            password_hasher(),
            AuditWriter(factory, settings.audit_spool_dir, seal),
            build_login_throttle(settings, redis),
            redis,
            OidcClient(settings) if settings.oidc_issuer else None,
            KeySnapshots(settings.key_outage_grace_seconds),
        )

    async def start(self) -> None:
        await self.audit.start()
        if self.settings.audit_retention_days > 0:
            days = self.settings.audit_retention_days
            self.retention = asyncio.create_task(retention_loop(self.db, days, self.audit.seal))

    async def close(self) -> None:
        if self.retention is not None:
            self.retention.cancel()
        await self.verification.close()
        await self.audit.close()  # before the engine goes: it writes what is queued
        await self.engine.dispose()
        if self.redis is not None:
            await self.redis.aclose()

    @property
    def secure_cookies(self) -> bool:
        # Production is served over https (settings refuse an http public URL there unless
        # told otherwise), so its cookies never travel in clear, whatever the URL says.
        return self.settings.mode == "production" or self.settings.base_url.startswith("https://")
