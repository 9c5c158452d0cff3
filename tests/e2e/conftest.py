"""The appliance as employees meet it, in a real browser.

Debian's Chromium driven by Playwright (never a downloaded browser), against a real
gateway (Postgres, Redis) in front of a real worker on a tiny random model, signing in
through the real test IdP (panva's oidc-provider) that the OIDC tests use.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from gateway import admin_tasks
from gateway.app import create_app
from gateway.settings import Settings
from gateway.web_app import default_root
from inference.server.app import create_app as create_worker_app
from inference.server.settings import ServerSettings
from tests.gateway.oidc_provider import CLIENT_ID, CLIENT_SECRET, RunningProvider, run_provider
from tests.gateway.postgres import fresh_postgres
from tests.inference.server.conftest import API_KEY, MODEL, free_port, serving, tiny_engine

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
# What FIELD-NOTES found Chromium needs here: no sandbox as root, no GPU, and no calls home
# (the network is closed; without these it retries many connections at every start).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
ADMIN_EMAIL = "root@example.test"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# Long enough that an answer can be stopped half-way on a fast CPU too (the tiny model
# writes 450 tokens in well under a second on a Zen 5, and a stop sent after the first
# token arrived could find the answer already done).
E2E_MAX_MODEL_LEN = 4096  # the tiny checkpoint's max_position_embeddings


@pytest.fixture(scope="session")
def built_app() -> Path:
    root = default_root()
    if not (root / "index.html").is_file():
        pytest.fail("the web app is not built: run the suite with `make test` (it runs `make ui`)")
    return root


# Per module, not per session: Playwright's sync API runs an event loop on the test
# thread for as long as it is open, and every other test's asyncio.run would then refuse.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def e2e_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.inference.checkpoints import make_checkpoint

    checkpoint = make_checkpoint(
        "llama", tmp_path_factory.mktemp("e2e-worker"), max_position_embeddings=E2E_MAX_MODEL_LEN
    )
    engine = tiny_engine(
        checkpoint, max_model_len=E2E_MAX_MODEL_LEN, kv_cache_memory_bytes=32 << 20
    )
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_worker_app(engine, settings)) as url:
        yield url


@dataclass
class Appliance:
    url: str
    worker_url: str
    settings: Settings
    provider: RunningProvider
    admin_email: str
    admin_password: str  # the break-glass account's


@pytest.fixture(scope="module")
def appliance(
    built_app: Path,
    e2e_worker: str,
    database_url: str,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Appliance]:
    """A gateway like a production one: Postgres, Redis, SSO, one worker."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stack = contextlib.ExitStack()
    try:
        db_url = off_loop(stack.enter_context, fresh_postgres(database_url, "enclave_e2e"))
        provider = stack.enter_context(run_provider(base))
        settings = Settings(
            data_dir=tmp_path_factory.mktemp("e2e-gateway"),
            database_url=db_url,
            redis_url=redis_url,
            public_url=base,
            oidc_issuer=provider.issuer,
            oidc_client_id=CLIENT_ID,
            oidc_client_secret=CLIENT_SECRET,
            oidc_admin_group="enclave-admins",
            workers=e2e_worker,
            worker_token=API_KEY,
            health_interval_ms=200,
            ui_dir=str(built_app),
        )
        off_loop(admin_tasks.migrate_database, settings)
        off_loop(asyncio.run, _departments(settings))
        password = off_loop(asyncio.run, admin_tasks.create_admin(settings, ADMIN_EMAIL))
        url = stack.enter_context(serving(create_app(settings), port=port))
        yield Appliance(url, e2e_worker, settings, provider, ADMIN_EMAIL, password)
    finally:
        off_loop(stack.close)  # the database is dropped with asyncio.run: off the loop too


def off_loop(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on another thread: Playwright's sync API keeps an event loop
    running on this one, where ``asyncio.run`` (the admin tasks, the database helpers)
    refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


async def _departments(settings: Settings) -> None:
    """research (alice's group is mapped to it) and legal (bob's group has its name)."""
    from gateway.domain.departments.schemas import GroupMappingCreate
    from gateway.domain.departments.service import DepartmentService

    await admin_tasks.create_department(settings, "Research", "research")
    await admin_tasks.create_department(settings, "Legal", "legal")
    async with admin_tasks.transaction(settings) as db:
        service = DepartmentService(db)
        research = await service.by_slug("research")
        await service.map_group(
            GroupMappingCreate(group="research-team", department_id=research.id)
        )


@contextlib.contextmanager
def browsing(
    browser: Browser, appliance: Appliance, viewport: dict[str, int] = DESKTOP, **options: Any
) -> Iterator[tuple[BrowserContext, Page]]:
    """A fresh browser profile (no cookies) with one page; fails the test on any Content
    Security Policy violation or uncaught script error the page reports."""
    context = browser.new_context(base_url=appliance.url, viewport=viewport, **options)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}")
            if message.type == "error" and "Content Security Policy" in message.text
            else None
        ),
    )
    try:
        yield context, page
    finally:
        context.close()
    assert not problems, problems
