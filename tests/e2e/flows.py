"""What people do in the app, as steps the e2e tests share."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, Request, Route, expect

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"  # the screenshots the README and docs show
AXE = ROOT / "admin-ui" / "node_modules" / "axe-core" / "axe.min.js"


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
    """Record the streaming answer's length at every change the page makes to it: the
    characters received so far, which the answer shows rendered as markdown (the rendered
    text itself may shrink by a character when a half-written mark closes)."""
    page.evaluate(
        """() => {
            window.__streamLengths = [];
            new MutationObserver(() => {
                const answer = document.querySelector('[data-streaming]');
                if (answer?.querySelector('.markdown')) {
                    window.__streamLengths.push(Number(answer.dataset.received));
                }
            }).observe(document.body, {
                subtree: true, childList: true, characterData: true, attributes: true
            });
        }"""
    )


def stream_lengths(page: Page) -> list[int]:
    return list(page.evaluate("() => window.__streamLengths"))


def csrf_of(page: Page) -> str:
    """The signed-in user's CSRF token, for the API calls a test makes as that user."""
    return str(page.request.get("/api/me").json()["csrf_token"])


def serious_violations(page: Page, view: str) -> list[str]:
    """axe-core's serious and critical violations (WCAG 2.1 A and AA) on the page."""
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        """async () => await axe.run(document, {
            runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] }
        })"""
    )
    return [
        f"{view}: {v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
