"""What people do in the app, as steps the e2e tests share."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from playwright.sync_api import Page, Request, Route, expect


def sign_in_with_sso(page: Page, login: str) -> None:
    """Open the app, which sends a stranger to its sign-in page; sign in there."""
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/signin$"))
    sign_in_at_idp(page, login)


def sign_in_at_idp(page: Page, login: str) -> None:
    """From the app's sign-in page through the IdP's login form, back to the chat."""
    page.get_by_role("link", name="Sign in with your company account").click()
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()


def send(page: Page, text: str) -> None:
    composer = page.get_by_role("textbox", name="Message")
    composer.fill(text)
    composer.press("Enter")


def answers(page: Page) -> Any:
    return page.locator("li[data-role=assistant]")


def questions(page: Page) -> Any:
    """The user's messages, as their text (without the actions beside them)."""
    return page.locator("li[data-role=user] .bubble")


def long_answers(page: Page, max_tokens: int) -> None:
    """Make the tiny random model's answers run ``max_tokens`` long: it may otherwise end
    at any token (its end-of-text is as likely as any other). The browser's request is
    changed on its way out; the stream itself is the real one."""

    def extend(route: Route, request: Request) -> None:
        body = json.loads(request.post_data or "{}")
        body.update(max_tokens=max_tokens, ignore_eos=True)
        route.continue_(post_data=json.dumps(body))

    page.route("**/v1/chat/completions", extend)


def running_requests(worker_url: str) -> float:
    """The worker's own count of sequences being generated (its /metrics)."""
    text = httpx.get(f"{worker_url}/metrics", timeout=5).text
    found = re.search(r"^\w*requests_running(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE)
    assert found, text[:2000]
    return float(found.group(1))


def watch_stream(page: Page) -> None:
    """Record the streaming answer's length at every change the page makes to it."""
    page.evaluate(
        """() => {
            window.__streamLengths = [];
            new MutationObserver(() => {
                const answer = document.querySelector('[data-streaming] .markdown');
                if (answer) window.__streamLengths.push(answer.textContent.length);
            }).observe(document.body, { subtree: true, childList: true, characterData: true });
        }"""
    )


def stream_lengths(page: Page) -> list[int]:
    return list(page.evaluate("() => window.__streamLengths"))


def csrf_of(page: Page) -> str:
    """The signed-in user's CSRF token, for the API calls a test makes as that user."""
    return str(page.request.get("/api/me").json()["csrf_token"])
