"""The gateway's settings: one frozen object, loaded once from ``ENCLAVE_*`` variables.

Nothing below this module reads the environment; the object is built in the CLI (or a
test) and passed into :func:`gateway.app.create_app`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

from gateway.domain.workers.worker_args import WorkerArgsError, parse_worker_args
from inference.secret_env import FILE_SUFFIX, SecretFileError, secret_from_env

PREFIX = "ENCLAVE_"
# Settings that may instead be read from a file: ENCLAVE_<NAME>_FILE=/run/secrets/...
SECRET_SETTINGS = ("database_url", "redis_url", "secret_key", "oidc_client_secret", "worker_token")

Mode = Literal["embedded", "production"]
LogFormat = Literal["auto", "json", "console"]
LogLevel = Literal["debug", "info", "warning", "error"]


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names the environment variable."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the gateway process is configured with.

    Each field ``name`` is read from ``ENCLAVE_<NAME>`` (upper case).
    """

    # embedded: one box, SQLite, secrets generated on first start; production: every
    # secret, Postgres and Redis given, nothing generated.
    mode: Mode = "embedded"
    # The address the gateway listens on.
    host: str = "127.0.0.1"
    # The port the gateway listens on (1-65535).
    port: int = 8000
    # The HTTP clients' line per request (worker health checks among them) shows only at debug.
    log_level: LogLevel = "info"
    # auto: JSON when stdout is not a terminal, console lines when it is.
    log_format: LogFormat = "auto"
    # The embedded default's files (SQLite, secrets, audit spool and head log, the worker's
    # log), kept 0700/0600.
    data_dir: Path = field(default_factory=lambda: Path(".enclave"))
    # SQLAlchemy async URL (postgresql+asyncpg://...). Empty means the embedded default:
    # SQLite under data_dir (production must set it).
    database_url: str = ""
    # Redis: rate-limit and quota counters, sessions, login throttles, the config generation
    # (production must set it). Empty: an in-process limiter, sessions in the database.
    redis_url: str = ""
    # Keys the API-key hash, the login cookie's signature and the audit chain's HMAC; at
    # least 32 characters in production. Embedded mode generates one on first start.
    secret_key: str = ""
    # The address users reach the gateway at (OIDC redirect URI, Secure cookies over https).
    public_url: str = ""
    # Production refuses a plain-http public URL unless this says it is on purpose.
    allow_insecure_public_url: bool = False
    # The IdP's issuer URL (its /.well-known/openid-configuration is read); empty: SSO off.
    oidc_issuer: str = ""
    # The client id registered at the IdP; required with an issuer.
    oidc_client_id: str = ""
    # The client's secret, sent to the token endpoint with HTTP Basic.
    oidc_client_secret: str = ""
    # The scopes the login asks for, space-separated. Entra ID and Google refuse a `groups`
    # scope, and Keycloak and Okta refuse one they do not define: leave it out there.
    oidc_scopes: str = "openid email profile groups"
    # The ID token claim that lists the user's groups (department mappings, admin group).
    oidc_groups_claim: str = "groups"
    # Members of this group (as the groups claim names it) are admins; others are members.
    oidc_admin_group: str = ""
    # A session ends after this long without a request.
    session_idle_minutes: int = 60
    # And after this long, however active.
    session_absolute_hours: int = 12
    # Failed break-glass logins allowed per account within the window; beyond them the
    # login answers 429 without checking the password.
    login_max_failures_per_account: int = 5
    # The same, per client address, across accounts.
    login_max_failures_per_address: int = 20
    # The window both counts run over (in Redis when configured, else per process).
    login_failure_window_seconds: int = 900
    # While the database is down, an API key is served from its last lookup only if that
    # lookup is younger than this; 0 refuses every key the database cannot check.
    key_outage_grace_seconds: int = 300
    # The department (slug) of users who have none; empty refuses them the API and chat.
    default_department: str = ""
    # Workers: comma-separated base URLs; each one's models come from its /v1/models.
    # Empty in embedded mode: the gateway starts one worker on ``model`` itself.
    workers: str = ""
    # The bearer token workers require (their --api-key-env); generated in embedded mode.
    worker_token: str = ""
    # The model (HF directory or .gguf) the embedded worker serves; its id is the path's stem.
    model: str = ".enclave/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    # The port the embedded worker listens on (127.0.0.1 only).
    worker_port: int = 8100
    # Comma-separated names of variables the embedded worker gets from the gateway's
    # environment beyond its allow-list (see docs/workers-routing.md).
    worker_env: str = ""
    # Further options for the embedded worker's `python -m inference serve`, split as a shell
    # would, e.g. "--quantization fp8 --step-time-budget-ms 0"; checked at start-up with the
    # worker's own parser. The model, address, name and token are the gateway's to set.
    worker_args: str = ""
    # How often every worker's /ready and /v1/models are checked.
    health_interval_ms: int = 2000
    # How long the gateway waits on a worker's answer (504 after).
    upstream_timeout_seconds: int = 600
    # Without Redis (or with it down) the limiter refuses with 503 unless this is on.
    limits_fail_open: bool = False
    # The cap on each prompt and response body kept, for departments that keep bodies.
    audit_body_max_bytes: int = 65536
    # The largest OpenAI API request body the gateway reads (413 above it); text only, so a
    # long context is well under 1 MiB. Other routes keep Litestar's own 10 MiB cap.
    api_body_max_bytes: int = 8 * 1024 * 1024
    # 0 keeps audit records forever; otherwise a job deletes older ones (the chain's anchor kept).
    audit_retention_days: int = 0
    # Where each committed audit batch's head (seq, hash) is appended; empty: under data_dir.
    # Worth most on storage the database's administrator cannot rewrite (docs/audit.md).
    audit_head_file: str = ""
    # An OTLP/HTTP collector (http://otel:4318): spans are recorded and exported only with it.
    otlp_endpoint: str = ""
    # The built web app (admin-ui/build); empty: the one beside the gateway package, which
    # `make ui` builds. A directory without index.html leaves `/` answering how to build it.
    ui_dir: str = ""
    # Gateway processes on one listening socket (uvicorn's supervisor starts them): one per
    # core the gateway may have. More than one needs what they share to be outside them.
    processes: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"{env_name('port')} must be between 1 and 65535, got {self.port}")
        if not self.host:
            raise SettingsError(f"{env_name('host')} must not be empty")
        if self.session_idle_minutes < 1:
            raise SettingsError(f"{env_name('session_idle_minutes')} must be at least 1")
        if self.session_absolute_hours < 1:
            raise SettingsError(f"{env_name('session_absolute_hours')} must be at least 1")
        for name in (
            "health_interval_ms",
            "upstream_timeout_seconds",
            "worker_port",
            "processes",
            "api_body_max_bytes",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{env_name(name)} must be at least 1")
        for name in ("audit_body_max_bytes", "audit_retention_days"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{env_name(name)} must not be negative")
        self._check_identity()
        for url in self.worker_urls:
            if not url.startswith(("http://", "https://")):
                raise SettingsError(f"{env_name('workers')}: {url!r} is not an http(s) URL")
        if self.processes > 1:
            # Each process would count its own limits, start its own worker, or write its
            # own SQLite chain: exact shared limits need Redis, one audit chain Postgres.
            for name, why in (
                ("redis_url", "the in-process limiter counts per process"),
                ("database_url", "the audit chain is shared through Postgres"),
                ("workers", "each process would start its own embedded worker"),
            ):
                if not getattr(self, name):
                    raise SettingsError(
                        f"{env_name('processes')} > 1 needs {env_name(name)}: {why}"
                    )
        if self.worker_args:
            try:
                parse_worker_args(self.worker_args)
            except WorkerArgsError as exc:
                raise SettingsError(f"{env_name('worker_args')}: {exc}") from None
        for name in self.worker_env_names:
            if name.startswith(PREFIX):
                raise SettingsError(
                    f"{env_name('worker_env')}: {name} is the gateway's own; it never reaches"
                    " the worker"
                )
        if self.oidc_issuer and not self.oidc_client_id:
            raise SettingsError(f"{env_name('oidc_client_id')} is required with an OIDC issuer")
        if self.mode == "production":
            if self.workers and not self.worker_token:
                raise SettingsError(f"{env_name('worker_token')} is required with workers")
            for name in ("secret_key", "database_url", "redis_url"):
                if not getattr(self, name):
                    raise SettingsError(f"{env_name(name)} is required in production mode")
            if len(self.secret_key) < 32:
                raise SettingsError(f"{env_name('secret_key')} must be at least 32 characters")
            self._check_public_url()

    def _check_identity(self) -> None:
        for name in (
            "login_max_failures_per_account",
            "login_max_failures_per_address",
            "login_failure_window_seconds",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{env_name(name)} must be at least 1")
        if self.key_outage_grace_seconds < 0:
            raise SettingsError(f"{env_name('key_outage_grace_seconds')} must not be negative")
        if self.oidc_issuer and "openid" not in self.oidc_scopes.split():
            raise SettingsError(f"{env_name('oidc_scopes')} must include openid")

    def _check_public_url(self) -> None:
        """Production: the public URL is https (cookies are Secure there), and SSO has one."""
        public = env_name("public_url")
        if self.oidc_issuer and not self.public_url:
            # The redirect URI the IdP sends users back to is built from it.
            raise SettingsError(f"{public} is required in production mode with OIDC")
        insecure = self.public_url and not self.public_url.startswith("https://")
        if insecure and not self.allow_insecure_public_url:
            raise SettingsError(
                f"{public} must be https:// in production mode (session cookies are"
                f" Secure); set {env_name('allow_insecure_public_url')}=true to accept"
                f" {self.public_url!r} anyway"
            )

    @property
    def effective_database_url(self) -> str:
        """The configured database, or the embedded SQLite file under ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'enclave.db').resolve()}"

    @property
    def worker_urls(self) -> list[str]:
        return [u.strip().rstrip("/") for u in self.workers.split(",") if u.strip()]

    @property
    def worker_arg_list(self) -> list[str]:
        return parse_worker_args(self.worker_args)

    @property
    def worker_env_names(self) -> list[str]:
        return [n.strip() for n in self.worker_env.split(",") if n.strip()]

    @property
    def audit_spool_dir(self) -> Path:
        """Where audit records wait, append-only, while the database is unreachable."""
        return self.data_dir / "audit-spool"

    @property
    def audit_head_path(self) -> Path:
        """The append-only log of the audit chain's heads (see gateway.domain.audit.head_log)."""
        return (
            Path(self.audit_head_file) if self.audit_head_file else self.data_dir / "audit-head.log"
        )

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``environ`` (default: the process environment).

        Each secret setting (:data:`SECRET_SETTINGS`) may come from the file that
        ``ENCLAVE_<NAME>_FILE`` names instead, read once here (one trailing newline
        stripped); both forms at once, or a file that cannot be read, is an error.
        Unknown ``ENCLAVE_*`` variables are not an error here (other processes share the
        prefix); :func:`unknown_variables` lists them so the CLI can warn about typos.
        """
        env = os.environ if environ is None else environ
        hints = get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name in names:
            if name in SECRET_SETTINGS:
                try:
                    raw = secret_from_env(env, env_name(name))
                except SecretFileError as exc:
                    raise SettingsError(str(exc)) from None
            else:
                raw = env.get(env_name(name))
            if raw is not None:
                values[name] = _convert(env_name(name), raw, hints[name])
        return cls(**values)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``ENCLAVE_*`` variables that name no setting: most likely typos."""
    names = {env_name(f.name) for f in dataclasses.fields(Settings)}
    names |= {env_name(name) + FILE_SUFFIX for name in SECRET_SETTINGS}
    return sorted(k for k in environ if k.startswith(PREFIX) and k not in names)


def env_name(field_name: str) -> str:
    return PREFIX + field_name.upper()


def _convert(var: str, raw: str, kind: Any) -> Any:
    choices = get_args(kind)
    if choices and all(isinstance(c, str) for c in choices):
        value = raw.strip().lower()
        if value not in choices:
            raise SettingsError(f"{var} must be one of {', '.join(choices)}; got {raw!r}")
        return value
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{var} must be an integer, got {raw!r}") from None
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise SettingsError(f"{var} must be true or false, got {raw!r}")
    if kind is Path:
        return Path(raw)
    if kind is str:
        return raw
    raise TypeError(f"no converter for {var} of type {kind!r}")  # a programming error
