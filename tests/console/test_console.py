"""The operator console in headless Chromium (tests/console/run.sh starts
the stack and seeds it).  What a person does, page by page:

- signs in with a token (nothing in localStorage or sessionStorage; the
  cookie is HttpOnly), sees the Now page's counts and follows one, and at
  the end signs out (the session is gone for the API too);
- finds a saga in the Sagas list, reads its steps, attempts (each with
  its idempotency key), timeline and envelope (the args' api_key masked);
- approves shop's gated step as ann from the Approvals inbox, and the saga
  completes with the charge run once;
- as agent, tries to approve its own submission and reads the API's
  refusal (four eyes);
- as oncall, opens the dead letter's group, dry-runs the group's bulk
  replay, opens its entry, and dry-runs its replay;
- as oncall, finds the saga held by its dead-lettered step from the Now
  page, reads its timeline, dry-runs then replays the dead letter, and
  sees the saga complete, its attempts listing the failed call and the
  replayed one;
- the Tools page lists the registry, and shows the circuit a downstream
  that refuses every connection opened (stock.check) with its error rate;
  the Now page counts it and links to it, and shows each partition's lag;
- a fetch without the CSRF token, and one from a foreign Origin, get 403;
- on the read-only gateway the banner says so, the buttons are disabled,
  and the API refuses a console POST even when a script sends it;
- axe-core finds no serious or critical violation on any page.

Screenshots of every page go to $SAGAD_TEST_CONSOLE_SHOTS."""
import json
import os
import re
import sys
import time
import urllib.request

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect, sync_playwright

BASE = os.environ["SAGAD_TEST_CONSOLE_URL"]
BASE_RO = os.environ["SAGAD_TEST_CONSOLE_URL_RO"]
SHOTS = os.environ["SAGAD_TEST_CONSOLE_SHOTS"]
TOKEN = {u: os.environ["SAGAD_TEST_CONSOLE_TOKEN_" + u.upper()]
         for u in ("shop", "ann", "agent", "oncall")}
SAGA_SHOP = os.environ["SAGAD_TEST_CONSOLE_SAGA_SHOP"]
SAGA_AGENT = os.environ["SAGAD_TEST_CONSOLE_SAGA_AGENT"]
SAGA_FAIL = os.environ["SAGAD_TEST_CONSOLE_SAGA_FAIL"]
AXE = Axe()
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def api(path, user="ann"):
    req = urllib.request.Request(BASE + path, headers={"Authorization": "Bearer " + TOKEN[user]})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def audit(page, name):
    """axe-core on the page as shown, and its screenshot."""
    page.wait_for_timeout(200)
    res = AXE.run(page)
    bad = [v for v in res.response["violations"] if v.get("impact") in ("serious", "critical")]
    for v in bad:
        print("  axe %s (%s): %s at %s" % (v["id"], v["impact"], v["help"],
                                            [n["target"] for n in v["nodes"][:3]]))
    check(not bad, "axe: no serious or critical violation on %s" % name)
    page.screenshot(path=os.path.join(SHOTS, name + ".png"), full_page=True)


def sign_in(page, base, user):
    page.goto(base + "/#/now")
    expect(page.get_by_label("Gateway token")).to_be_visible()
    page.get_by_label("Gateway token").fill(TOKEN[user])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#who-name")).to_have_text("signed in as " + user)


def attempts_table(page):
    return page.get_by_role("region", name="Attempts").locator("tbody tr")


def attempts_lists_keys(page, saga_id, user):
    """The saga page's Attempts table has a row for every attempt the API
    gives, in its order, each with its idempotency key, status and error
    code."""
    want = api("/v1/sagas/%s/attempts" % saga_id, user)["attempts"]
    rows = attempts_table(page)
    expect(rows).to_have_count(len(want), timeout=15000)
    ok = len(want) > 0
    for i, a in enumerate(want):
        text = rows.nth(i).inner_text()
        ok = ok and a["idempotency_key"] in text and (a["status"] or "running") in text and \
            (a["error_code"] or "") in text and a["step_name"] in text
    check(ok, "the saga page lists its %d attempts with their keys, statuses and codes"
          % len(want))
    return want


def approver_pages(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    console_errors = []
    # Script errors and CSP refusals; a status the test asked for (the
    # first /console/session's 401, the refused POSTs) is not one.
    page.on("console", lambda m: m.type == "error" and not m.text.startswith(
        "Failed to load resource") and console_errors.append(m.text))
    page.goto(BASE + "/")
    expect(page.get_by_label("Gateway token")).to_be_visible()
    check("null" not in page.locator("main").inner_text(), "the sign-in page shows no stray value")
    audit(page, "login")
    sign_in(page, BASE, "ann")
    cookies = ctx.cookies()
    check(any(c["name"] == "sagad_session" and c["httpOnly"] and c["secure"]
              and c["sameSite"] == "Strict" for c in cookies),
          "the session cookie is HttpOnly, Secure, SameSite=Strict")
    check(page.evaluate("localStorage.length + sessionStorage.length") == 0,
          "nothing in localStorage or sessionStorage")
    check(page.evaluate("document.cookie") == "", "the page's script cannot read the cookie")

    # The keyboard: on a page just loaded the first Tab reaches "Skip to
    # content", visibly focused, and Enter moves to the page's content.
    page.reload()
    expect(page.locator(".tile").first).to_be_visible()
    page.keyboard.press("Tab")
    check(page.evaluate("document.activeElement.id") == "skip", "the first Tab reaches the skip link")
    check(page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none",
          "keyboard focus is visible")
    page.keyboard.press("Enter")
    check(page.evaluate("document.activeElement.id") == "main", "Enter skips to the content")

    # Now: the counts, one followed to its list.
    expect(page.locator(".tile").first).to_be_visible()
    expect(page.locator("#updated")).to_contain_text("updated")
    tile = page.locator("a.tile", has_text="awaiting approval")
    check(tile.locator(".n").inner_text() == "2", "Now counts two sagas awaiting approval")
    audit(page, "now")
    tile.click()
    expect(page).to_have_url(BASE + "/#/sagas?awaiting_approval=true")
    expect(page.get_by_role("link", name=SAGA_SHOP)).to_be_visible()
    audit(page, "sagas")
    # On a phone: the list scrolls sideways inside its box, the page not.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(200)
    check(page.evaluate("document.documentElement.scrollWidth") <= 390,
          "on a 390 px phone the page does not scroll sideways")
    page.screenshot(path=os.path.join(SHOTS, "sagas-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    # A time filter typed in the viewer's zone goes to the API as UTC.
    page.get_by_label("Created after").fill("2000-01-01T00:00")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r".*created_after=2000-01-01T.*Z.*"))
    expect(page.get_by_role("link", name=SAGA_SHOP)).to_be_visible()
    page.go_back()

    # One saga: steps, timeline, masked envelope.
    page.get_by_role("link", name=SAGA_SHOP).click()
    expect(page.get_by_role("heading", name="Saga refund-shop")).to_be_visible()
    expect(page.locator("#timeline")).to_contain_text("step.approval_requested", timeout=15000)
    attempts_lists_keys(page, SAGA_SHOP, "ann")
    env_text = page.locator("pre.json").last.inner_text()
    check('"api_key": "***"' in env_text and "not-shown" not in page.content(),
          "the envelope shown masks the args' api_key")
    audit(page, "saga")

    # Pause: the page says so and stops refreshing.
    page.get_by_role("button", name="Pause auto-refresh").click()
    expect(page.locator("#updated")).to_contain_text("paused")
    page.get_by_role("button", name="Resume auto-refresh").click()

    # Approvals: ann approves shop's charge.
    page.goto(BASE + "/#/approvals")
    card = page.locator("article", has_text=SAGA_SHOP)
    expect(card).to_be_visible()
    check(page.locator("article", has_text=SAGA_AGENT).count() == 1,
          "ann's inbox holds agent's saga too (not ann's own)")
    audit(page, "approvals")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_contain_text("A reason is required.")
    card.get_by_label("Reason for the decision on charge").fill("checked the invoice")
    card.get_by_role("button", name="Approve").click()
    expect(card.locator(".msg.ok")).to_contain_text("approve:", timeout=15000)
    env = None
    for _ in range(60):
        env = api("/v1/sagas/%s" % SAGA_SHOP)
        if env["status"] not in ("running", "awaiting_approval"):
            break
        time.sleep(0.5)
    check(env["status"] == "ok", "shop's saga completed after ann's approval (%s)" % env["status"])
    charge = [s for s in env["steps"] if s["name"] == "charge"][0]
    check(charge["attempts"] == 1, "the charge ran once (%d attempts)" % charge["attempts"])

    # Tools: stock.check's downstream refuses every connection, so its
    # circuit is open on the worker (which writes it to PostgreSQL within
    # a second) and every call failed.  The Now page counts it and links
    # to the Tools page, and shows each partition's lag as its owner
    # measured it.
    state = None
    for _ in range(150):
        item = [x for x in api("/v1/tools")["items"] if x["name"] == "stock.check"][0]
        lagged = [p for p in api("/v1/summary")["partitions"] if p["lag"] is not None]
        state = (item.get("breaker") or {}).get("state")
        if state == "open" and len(lagged) >= 2:
            break
        time.sleep(0.2)
    check(state == "open", "the API has stock.check's circuit open (%s)" % state)
    page.goto(BASE + "/#/now")
    tile = page.locator("a.tile", has_text="circuit open")
    expect(tile.locator(".n")).to_have_text("1")
    lags = page.locator("table:has(caption:text('Worker partitions')) span[title^='high watermark']")
    expect(lags.first).to_be_visible()
    check(lags.count() >= 2, "Now shows the lag of both partitions (%d)" % lags.count())
    tile.click()
    expect(page).to_have_url(BASE + "/#/tools")
    expect(page.get_by_role("cell", name="payment.charge_high")).to_be_visible()
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name="stock.check", exact=True))
    expect(row.locator(".breaker[data-state=open]")).to_contain_text("open since")
    expect(row).to_contain_text("100% (")
    builtin = page.get_by_role("row").filter(has=page.get_by_role("cell", name="echo", exact=True))
    check(builtin.locator(".breaker").count() == 0, "a builtin tool shows no circuit")
    audit(page, "tools")

    # CSRF and Origin, from the page's own script.
    status = page.evaluate("""async (id) => (await fetch('/v1/sagas/' + id + '/cancel', {
        method: 'POST', headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({reason: 'no csrf'})})).status""", SAGA_AGENT)
    check(status == 403, "a cookie POST without X-CSRF-Token is refused 403 (%d)" % status)
    r = ctx.request.post(BASE + "/v1/sagas/%s/cancel" % SAGA_AGENT,
                         headers={"Origin": "https://evil.example", "Content-Type": "application/json"},
                         data=json.dumps({"reason": "foreign"}))
    check(r.status == 403, "a cookie POST from a foreign Origin is refused 403 (%d)" % r.status)
    check(not console_errors, "no script error or CSP refusal in the browser's console: %s"
          % console_errors[:3])

    # Sign out: the session is over for the API too.
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_text("Signed out.")).to_be_visible()
    r = ctx.request.get(BASE + "/console/session")
    check(r.status == 401, "after sign-out the session is gone (%d)" % r.status)
    ctx.close()


def own_submission_refused(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, BASE, "agent")
    page.goto(BASE + "/#/sagas/" + SAGA_AGENT)
    expect(page.get_by_text("you submitted this saga")).to_be_visible()
    page.get_by_label("Reason for the decision on charge").fill("my own")
    page.get_by_role("button", name="Approve").click()
    refusal = page.locator(".msg.error")
    expect(refusal).to_contain_text("approve refused (403)", timeout=15000)
    print("  the API said: " + refusal.inner_text())
    check(True, "approving one's own submission shows the API's refusal")
    page.screenshot(path=os.path.join(SHOTS, "four-eyes.png"), full_page=True)
    check(api("/v1/sagas/%s" % SAGA_AGENT)["status"] == "awaiting_approval",
          "agent's saga still waits for another person")
    ctx.close()


def dead_letters(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, BASE, "oncall")
    page.goto(BASE + "/#/now")
    page.locator("a.tile", has_text="dead letters pending").click()
    link = page.get_by_role("link", name="input.schema.invalid")
    expect(link).to_be_visible()
    audit(page, "dead-letters")
    link.click()
    # The group's bulk replay, as a dry run: each entry through the API.
    bulk = page.locator(".card", has_text="Replay this group")
    bulk.get_by_label("Reason for the bulk replay").fill("downstream fixed")
    bulk.get_by_role("button", name="Replay the group's pending entries").click()
    expect(bulk.locator(".msg")).to_contain_text("Dry run: 1 of 1: 1 would be replayed, 0 refused",
                                                 timeout=15000)
    check(True, "a group's bulk replay (dry run) shows its progress")
    audit(page, "dead-letter-group")
    page.locator("table a", has_text="#").first.click()
    expect(page.get_by_role("heading", name="Payload")).to_be_visible()
    page.get_by_role("button", name="Dry-run replay").click()
    expect(page.locator(".msg.info, .msg.error").first).to_contain_text("Dry run", timeout=15000)
    print("  dry run: " + page.locator(".msg.info, .msg.error").first.inner_text())
    audit(page, "dead-letter")
    ctx.close()


def failed_saga_replayed(browser):
    """The issue's walk: a saga failed (its step dead-lettered, the saga
    held), found from the Now page, its timeline read, its dead letter
    dry-run then replayed, and the saga completes."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, BASE, "oncall")
    page.locator("a.tile", has_text="held (dead letter)").click()
    expect(page).to_have_url(BASE + "/#/sagas?status=held")
    page.get_by_role("link", name=SAGA_FAIL).click()
    expect(page.locator("#timeline")).to_contain_text("saga.dead_lettered", timeout=15000)
    page.get_by_role("link", name="downstream.garbled").click()
    page.locator("table a", has_text="#").first.click()
    page.get_by_role("button", name="Dry-run replay").click()
    expect(page.locator(".msg.info").first).to_contain_text("Dry run: would_replay", timeout=15000)
    check(api("/v1/sagas/%s" % SAGA_FAIL, "oncall")["saga_status"] == "held",
          "a dry run changes nothing: the saga is still held")
    page.get_by_label("Reason for replay").fill("the carrier fixed its API")
    page.get_by_role("button", name="Replay", exact=True).click()
    expect(page.locator(".msg.ok")).to_contain_text("Replay: replayed", timeout=15000)
    env = None
    for _ in range(60):
        env = api("/v1/sagas/%s" % SAGA_FAIL, "oncall")
        if env["saga_status"] == "completed":
            break
        time.sleep(0.5)
    check(env["saga_status"] == "completed",
          "the replayed saga completed (%s)" % env["saga_status"])
    page.goto(BASE + "/#/sagas/" + SAGA_FAIL)
    expect(page.locator("#timeline")).to_contain_text("saga.completed", timeout=15000)
    check(True, "its timeline shows the replay's outcome")
    dl_row = page.locator("table", has=page.get_by_role("columnheader", name="Replays")).locator("tbody tr")
    expect(dl_row).to_contain_text("replayed")
    check(dl_row.locator("td").nth(4).inner_text() == "1",
          "the saga's page lists its dead letter, replayed once")
    # Its attempts: the ship step's poisoned call, then the replay's call
    # under the next generation, ok.
    want = attempts_lists_keys(page, SAGA_FAIL, "oncall")
    ship = [a for a in want if a["step_name"] == "ship"]
    check(len(ship) == 2 and ship[0]["error_code"] == "downstream.garbled" and
          ship[1]["status"] == "ok" and ship[1]["generation"] == ship[0]["generation"] + 1,
          "the ship step's failed attempt and its replayed one, each with its generation")
    audit(page, "replayed")
    ctx.close()


def read_only(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, BASE_RO, "oncall")
    expect(page.locator("#banner")).to_contain_text("Read-only console")
    page.goto(BASE_RO + "/#/sagas/" + SAGA_AGENT)
    expect(page.get_by_role("button", name="Cancel saga")).to_be_disabled()
    page.goto(BASE_RO + "/#/dead-letters")
    page.get_by_role("link", name="input.schema.invalid").click()
    page.locator("table a", has_text="#").first.click()
    expect(page.get_by_role("button", name="Replay", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Discard")).to_be_disabled()
    check(True, "read-only: the banner shows, Cancel, Replay and Discard are disabled")
    audit(page, "read-only")
    status = page.evaluate("""async (id) => {
        const s = await (await fetch('/console/session')).json();
        const r = await fetch('/v1/sagas/' + id + '/cancel', {method: 'POST',
            headers: {'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf_token},
            body: JSON.stringify({reason: 'read-only'})});
        return r.status + ' ' + (await r.json()).rule; }""", SAGA_AGENT)
    check(status == "403 console.read_only", "read-only: the API refuses a console POST (%s)" % status)
    ctx.close()


def main():
    started = time.time()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["SAGAD_TEST_CHROMIUM"],
                                    args=["--no-sandbox"], headless=True)
        try:
            for part in (approver_pages, own_submission_refused, dead_letters,
                         failed_saga_replayed, read_only):
                try:
                    part(browser)
                except Exception as e:  # a timeout names what it waited for
                    failures.append("%s: %s" % (part.__name__, str(e).splitlines()[0]))
                    print("FAIL %s: %s" % (part.__name__, e), flush=True)
        finally:
            browser.close()
    print("console: %d checks, %d failed, %.1f s" % (checks, len(failures), time.time() - started))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
