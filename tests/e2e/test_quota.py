"""An admin lowers a department's daily quota; the employee sees it before and when sending."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, expect

from tests.e2e.conftest import Appliance, browsing
from tests.e2e.flows import answers, csrf_of, long_answers, send, sign_in_with_sso


def test_a_lowered_quota_refuses_the_next_message_with_its_reset_time(
    browser: Browser, appliance: Appliance
) -> None:
    with browsing(browser, appliance) as (_, alice), browsing(browser, appliance) as (_, bob):
        sign_in_with_sso(alice, "alice")
        quota = alice.locator("[data-quota]")
        expect(quota).to_contain_text("no daily limit")
        long_answers(alice, 20)
        send(alice, "How many parts passed inspection?")
        expect(answers(alice)).to_have_count(1, timeout=30_000)

        # Bob is in the admins' group at the IdP: he lowers research's daily quota.
        sign_in_with_sso(bob, "bob")
        departments = bob.request.get("/api/admin/departments").json()["items"]
        research = next(d for d in departments if d["slug"] == "research")
        lowered = bob.request.patch(
            f"/api/admin/departments/{research['id']}",
            data={"daily_token_quota": 30},
            headers={"X-CSRF-Token": csrf_of(bob)},
        )
        assert lowered.ok, lowered.text()

        alice.reload()  # the quota line reads the new limit: nothing left today
        expect(quota).to_contain_text("0 tokens left today", timeout=15_000)
        send(alice, "And how many failed?")
        refusal = alice.locator("[data-notice=refusal]")
        expect(refusal).to_contain_text("Your department's daily token quota is used up.")
        # The reset is midnight UTC, said as a time and as a wait.
        expect(refusal).to_have_text(
            re.compile(r"It resets (at|on .+ at) \d\d:\d\d \(in \d+ \w+\)\.")
        )
        expect(answers(alice)).to_have_count(1)  # no answer was generated
