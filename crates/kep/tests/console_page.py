#!/usr/bin/env python3
"""Headless Chromium on kep's web console (`/console`), run by tests/it/serve/browser.rs in
a network namespace of its own (only `lo`).

It starts `kep serve`, then as an operator would: a wrong token is refused; the right one
signs in; a participant joining (the live demo page, publishing Chromium's fake camera)
appears in the room list, and is kicked from the page; a message sent with the CLI shows
its timeline up to status 200; a deployment's chart moves under load; a DRM session and
the activity stream show. On the way it checks what the console shows: every time in the
browser's zone with the zone's name (the page runs in America/Los_Angeles, the messaging
service's zone is Asia/Seoul); a mirror's copied calls on its chart; axis labels that fit,
series in the colours they are named after, legend figures to three digits; an identity
provider's client secret masked on the adapter page, its data model kept in its card; the
demo page's tiles named after their participant. Prints one JSON line per step; exits 1
with the failed step.
With KEP_CONSOLE_SHOTS set to a directory, it saves a screenshot of each page there (the
README's).
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from playwright.sync_api import sync_playwright

from kep_serve import emit, serving, until

KEP = sys.argv[1]
INSTANCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../kep-serving/tests/instance.py")
SHOTS = os.environ.get("KEP_CONSOLE_SHOTS")
TOKEN = "operator-token-of-the-console-test"
CLIENT_SECRET = "client-secret-of-the-console-test-9f3k"

# Every chart of the endpoint page as drawn: its series (colour, width), its legend (the
# marker's colour, the figure shown) and its y axes (their width, their widest label's).
CHARTS = """() => {
  const rgb = (c) => { const i = document.createElement("i"); i.style.color = c; document.body.append(i);
    const r = getComputedStyle(i).color; i.remove(); return r; };
  return Object.fromEntries([...document.querySelectorAll("[data-chart]")].map((el) => {
    const u = el.plot;
    const series = u.series.slice(1).map((s, i) => ({ label: s.label, show: s.show, width: s.width,
      stroke: rgb(s._stroke ?? (typeof s.stroke === "function" ? s.stroke(u, i + 1) : s.stroke)) }));
    const legend = [...el.querySelectorAll(".u-legend .u-series")].slice(1).map((tr) => ({
      label: tr.querySelector(".u-label").textContent,
      marker: getComputedStyle(tr.querySelector(".u-marker")).borderColor,
      value: tr.querySelector(".u-value").textContent }));
    const axes = u.axes.slice(1).map((a) => { u.ctx.font = a.font[0];
      const widest = Math.max(0, ...(a._values || []).map((v) => u.ctx.measureText(String(v)).width / devicePixelRatio));
      return { size: a._size, room: a._size - a.ticks.size - a.gap, widest, labels: a._values }; });
    return [el.dataset.chart, { series, legend, axes }];
  }));
}"""
# The times a page shows, as text and as the instant they name.
TIMES = "els => els.map(e => ({ text: e.textContent, at: e.dateTime }))"


def shot(page, name):
    if SHOTS:
        time.sleep(0.5)  # the last refresh painted
        page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def main():
    with serving(KEP, KEP_ADMIN_TOKEN=TOKEN) as (env, urls):
        run(env, urls)


def cli(env, *args):
    out = subprocess.run([KEP, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        emit("failed", step=" ".join(args), stderr=out.stderr)
        sys.exit(1)
    return json.loads(out.stdout) if out.stdout.strip() else None


def call(url, method="GET", body=None, token=None):
    req = urllib.request.Request(url, method=method, data=body and json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token or TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as res:
        text = res.read()
        return json.loads(text) if text else None


def run(env, urls):
    admin, live = urls["admin"], urls["live"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream", "--allow-loopback-in-peer-connection"])
        console = browser.new_page(viewport={"width": 1360, "height": 860}, locale="en-US",
                                   timezone_id="America/Los_Angeles")
        times = {}
        console.goto(f"{admin}/console")

        # A wrong token is refused and kept nowhere.
        console.fill("#token", "not-the-token")
        console.click("#sign-in-form button")
        until("a wrong token is refused", lambda: console.text_content("#sign-in-error") == "That is not the operator token.")
        if console.evaluate("sessionStorage.length") != 0 or console.is_visible("#nav"):
            emit("failed", step="a refused token signs nobody in")
            sys.exit(1)
        emit("refused")

        console.fill("#token", TOKEN)
        console.click("#sign-in-form button")
        until("signed in", lambda: console.is_visible("#nav a[data-page=live]"))
        emit("signed in", url=console.url, stored=console.evaluate("Object.values(sessionStorage)"))

        # Live: alice joins and publishes from the demo page; the console shows her, then
        # kicks her.
        secrets = call(f"{admin}/admin/v1/live/services", "POST", {"serviceId": "demo"})
        cli(env, "live", "provision", "--service-id", "demo", "--admin-secret", secrets["adminSecret"])
        console.goto(f"{admin}/console#/live")
        token = cli(env, "live", "token", "stage", "alice", "--service-id", "demo",
                    "--service-secret", secrets["serviceSecret"])["token"]
        alice = browser.new_page()
        alice.goto(f"{live}/demo?token={token}")
        row = console.locator('tr[data-participant="alice"]')
        until("alice appears with her stream", lambda: row.count() == 1 and row.locator(".stream-chip").count() == 1)
        emit("room appeared", row=row.inner_text())
        shot(console, "live")
        row.get_by_role("button", name="Kick").click()
        row.get_by_role("button", name="Confirm kick").click()
        until("alice hears she was kicked", lambda: alice.evaluate("window.kep.events.some(e => e.event === 'Kicked')"))
        until("alice leaves the list", lambda: row.count() == 0)
        emit("kicked")

        # Messaging: a message's timeline up to its final status.
        client = cli(env, "msg", "client", "--name", "console")
        cli(env, "msg", "token", "--client-id", client["client_id"], "--client-secret", client["client_secret"])
        uid = cli(env, "msg", "send-xms", "--to", "821012345678", "--from", "0212345678",
                  "--text", "hello from the console test", "--cid", "console-1")["uid"]
        console.goto(f"{admin}/console#/messaging")
        message = console.locator(f'a[href="#/messaging/message/{uid}"]')
        until("the message is listed", lambda: message.count() == 1)
        times["messaging"] = console.locator("[data-panel=Outbox] tbody time").evaluate_all(TIMES)
        shot(console, "messaging")
        message.click()
        until("its timeline reaches 200",
              lambda: console.locator('.timeline li[data-event=finished][data-status="200"]').count() == 1)
        steps = console.locator(".timeline li").evaluate_all("els => els.map(e => e.dataset.event)")
        emit("timeline", events=steps, facts=console.inner_text(".facts"))
        shot(console, "message")

        # Serving: the deployment's calls-per-second chart moves under load.
        cli(env, "serving", "image", "create", "py", "--", "python3", INSTANCE)
        endpoint = cli(env, "serving", "endpoint", "create", "demo")
        cli(env, "serving", "deployment", "create", "demo", "blue", "--image", "py",
            "--readiness-http", "/ready", "--readiness-interval-s", "0.2")
        subprocess.run([KEP, "serving", "deployment", "wait", "demo", "blue", "--timeout-s", "60"],
                       env=env, check=True, capture_output=True)
        console.goto(f"{admin}/console#/serving/endpoint/demo")
        until("the charts draw", lambda: console.locator("[data-chart=qps]").count() == 1)
        idle = json.loads(console.get_attribute("[data-chart=qps]", "data-last") or "[0]")[0]
        stop = threading.Event()

        def load():
            while not stop.is_set():
                try:
                    call(f"{endpoint['url']}/hello", token=endpoint["api_key"])
                except OSError:
                    pass
        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            qps = until("the chart moves", lambda: (
                v := json.loads(console.get_attribute("[data-chart=qps]", "data-last") or "[0]")[0]) and v > 5 and v)
            time.sleep(3)  # a few points of it for the screenshot
            shot(console, "serving")
        finally:
            stop.set()
            for t in threads:
                t.join()
        emit("chart moved", idle=idle, qps=qps)

        # A mirror: green gets a copy of each call blue answers, and its chart counts them.
        cli(env, "serving", "deployment", "create", "demo", "green", "--image", "py",
            "--readiness-http", "/ready", "--readiness-interval-s", "0.2")
        subprocess.run([KEP, "serving", "deployment", "wait", "demo", "green", "--timeout-s", "60"],
                       env=env, check=True, capture_output=True)
        cli(env, "serving", "mirror", "demo", "--responder", "blue")
        stop.clear()
        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            last = lambda: json.loads(console.get_attribute("[data-chart=qps]", "data-last") or "[]")
            mirrored = until("green's chart counts the mirrored calls",
                             lambda: len(v := last()) == 3 and v[2] and v[2] > 2 and v)
            time.sleep(2)  # a few points of it on every chart
            box = console.locator("[data-chart=latency] .u-over").bounding_box()
            console.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
            charts = console.evaluate(CHARTS)
            console.mouse.move(0, 0)
        finally:
            stop.set()
            for t in threads:
                t.join()
        emit("mirror counted", qps=mirrored, charts=charts)

        # Adapter: a DRM session and its history.
        org = call(f"{admin}/admin/v1/adapter/org-login-types", "POST", {
            "method": "OAUTH2", "adapter_agent": "127.0.0.1:9",
            "data_model": {"login": {"oauth2": {
                "authorization_endpoint": "https://idp.example/oauth2/v2.0/authorize?tenant=" + "x" * 120,
                "token_endpoint": "https://idp.example/oauth2/v2.0/token", "response_type": "code",
                "client_id": "kep-console", "client_secret": CLIENT_SECRET, "scopes": ["openid"]}}}})
        session = call(f"{admin}/admin/v1/adapter/drm-requests", "POST",
                       {"org_login_type_id": org["id"], "file_id": "report.pdf", "file_type": "DRM", "user": "kim"})
        console.goto(f"{admin}/console#/adapter")
        listed = console.locator(f'a[href="#/adapter/session/{session["session_id"]}"]')
        until("the DRM session is listed", lambda: listed.count() == 1)
        times["adapter"] = console.locator('[data-panel="DRM sessions"] tbody time').evaluate_all(TIMES)
        page = console.content()
        orgs = console.locator('[data-panel="Organisation login types"]')
        adapter_page = {
            "secret_shown": CLIENT_SECRET in page,
            "masked": "••••" + CLIENT_SECRET[-4:] in page,
            "endpoint_shown": "https://idp.example/oauth2/v2.0/token" in page,
            # The data model wraps in its card: the card neither overflows nor scrolls.
            "card": orgs.evaluate("el => ({ scroll: el.scrollWidth, client: el.clientWidth })"),
        }
        shot(console, "adapter")
        listed.click()
        until("its history shows the agent's notification",
              lambda: console.locator("[data-panel=History] tbody tr").count() >= 1)
        emit("drm session", facts=console.inner_text(".facts"), adapter=adapter_page)

        # The activity stream: what happened above, as it happened.
        console.goto(f"{admin}/console#/activity")
        rows = console.locator("tr[data-event]")
        until("the activity shows", lambda: rows.count() > 5)
        seen = set(rows.evaluate_all("els => els.map(e => e.dataset.event)"))
        times["activity"] = console.locator("tr[data-event] time").evaluate_all(TIMES)
        accepted = console.locator("tr[data-event='message.accepted'] time").evaluate_all(TIMES)
        emit("activity", events=sorted(seen))
        shot(console, "activity")
        console.goto(f"{admin}/console#/")
        until("the overview shows", lambda: console.locator(".card").count() >= 5)
        shot(console, "overview")
        # One time rule: the message's acceptance, in its list and in the activity, is one
        # instant shown alike.
        emit("times", times=times, accepted=accepted, messaging_zone="Asia/Seoul")
        browser.close()


if __name__ == "__main__":
    main()
