#!/usr/bin/env python3
"""Checks weir's admin dashboard in headless Chromium, in real time, over the DevTools protocol.

Usage: dashboard_check.py ADMIN_URL SCREENSHOT.png
Loads ADMIN_URL/ while the caller keeps weir under load and checks: figures on first paint
(requests/s, p99 and the server table filled from the page's first fetch, before a second);
the numbers the page shows twice, 3 s apart, move (requests/s > 0, the request total grows)
and match /metrics (the page's request total, each upstream server's requests and each zone's
hits are values /metrics passed through: not above a scrape made just after, and within a few
seconds of traffic of it). Then presses the Drain button of the first upstream server and
checks /metrics says it is drained and takes no new requests, presses Enable and checks it is
back, and presses the reload and purge buttons. Saves a screenshot (with traffic still
flowing). Exits 1 on a failed check, printing why. Needs `chromium` and `websocket-client`.
"""
import base64, json, re, subprocess, sys, tempfile, time, urllib.request

import websocket  # websocket-client

admin, shot = sys.argv[1].rstrip("/"), sys.argv[2]
port = 9333
profile = tempfile.mkdtemp(prefix="weir-chromium-")
browser = subprocess.Popen(
    ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
     f"--user-data-dir={profile}", "--window-size=1400,1300", "about:blank"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
            page = next(t for t in targets if t["type"] == "page")
            break
        except Exception:
            time.sleep(0.1)
    else:
        sys.exit("chromium did not start")
    ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
    ids = iter(range(1, 10**6))

    def call(method, **params):
        i = next(ids)
        ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    sys.exit(f"{method}: {msg['error']}")
                return msg["result"]

    def js(expr):
        return call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def page_values():
        expr = ("JSON.stringify({total: +document.getElementById('total').dataset.value,"
                " rps: +document.getElementById('rps').dataset.value,"
                " scrapes: +document.body.dataset.scrapes,"
                " p99: document.getElementById('p99').textContent,"
                " servers: [...document.querySelectorAll('#servers tbody tr[data-server]')].map(r => ["
                "   r.dataset.upstream, r.dataset.server, +r.dataset.requests, r.dataset.health]),"
                " zones: [...document.querySelectorAll('#zones tbody tr[data-zone]')].map(r => [r.dataset.zone, +r.dataset.hits]),"
                " routes: document.querySelectorAll('#routes tbody tr[data-route]').length,"
                " status: document.getElementById('status').textContent})")
        return json.loads(js(expr))

    def scrape():
        text = urllib.request.urlopen(admin + "/metrics").read().decode()
        out = {"total": 0.0}
        for m in re.finditer(r'^(\w+)\{([^}]*)\} (\S+)$', text, re.M):
            name, labels, v = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))
            if name == "weir_http_requests_total" and labels.get("listener") != "admin":
                out["total"] += v
            elif name in ("weir_upstream_requests_total", "weir_upstream_server_drained"):
                out[(name, labels["upstream"], labels["server"])] = v
            elif name == "weir_cache_hits_total":
                out[("hits", labels["zone"])] = v
        return out

    def agrees(shown, after, slack, label):
        # The page shows figures at most ~1 s old: /metrics read just after is ahead by at most
        # about a second and a half of traffic, and never behind.
        if not shown <= after <= shown + slack:
            failures.append(f"{label}: page {shown} vs /metrics {after} (slack {slack:.0f})")

    failures = []
    call("Page.enable")
    call("Page.navigate", url=admin + "/")
    time.sleep(0.7)
    # First paint: one fetch of /dashboard.json, and the figures are there.
    paint = page_values()
    if paint["scrapes"] != 1 or not paint["rps"] > 0 or paint["p99"] in ("", "–") or not paint["servers"]:
        failures.append(f"no figures on first paint: {paint}")
    time.sleep(2.8)
    first, after_first = page_values(), scrape()
    time.sleep(3)
    second, after_second = page_values(), scrape()
    for shown, after, label in ((first, after_first, "first"), (second, after_second, "second")):
        slack = max(1.5 * shown["rps"], 10)
        agrees(shown["total"], after["total"], slack, f"{label} request total")
        for upstream, server, n, _ in shown["servers"]:
            agrees(n, after[("weir_upstream_requests_total", upstream, server)], slack, f"{label} {server} requests")
        for zone, hits in shown["zones"]:
            agrees(hits, after[("hits", zone)], slack, f"{label} zone {zone} hits")
    # Drain the first server with its button, then enable it.
    upstream, server = second["servers"][0][0], second["servers"][0][1]
    key = ("weir_upstream_requests_total", upstream, server)
    js("document.querySelector('#servers tbody tr[data-server] button').click()")
    time.sleep(1.5)
    drained, drained_at = page_values(), scrape()
    time.sleep(2)
    still = scrape()
    drain_msg = js("document.getElementById('message').textContent")
    if drained_at[("weir_upstream_server_drained", upstream, server)] != 1 or drained["servers"][0][3] != "drained":
        failures.append(f"the Drain button did not drain {server}: {drain_msg!r}, {drained['servers'][0]}")
    if still[key] != drained_at[key]:
        failures.append(f"{server} drained but took {still[key] - drained_at[key]} requests")
    js("document.querySelector('#servers tbody tr[data-server] button').click()")
    time.sleep(1.5)
    enabled = scrape()
    time.sleep(1)
    if enabled[("weir_upstream_server_drained", upstream, server)] != 0 or not scrape()[key] > enabled[key]:
        failures.append(f"the Enable button did not bring {server} back")
    # The buttons: reload, and purge (its confirmation answered yes).
    call("Runtime.evaluate", expression="window.confirm = () => true; document.getElementById('reload').click()")
    time.sleep(1)
    reload_msg = call("Runtime.evaluate", expression="document.getElementById('message').textContent", returnByValue=True)["result"]["value"]
    call("Runtime.evaluate", expression="document.getElementById('purge').click()")
    time.sleep(1)
    purge_msg = call("Runtime.evaluate", expression="document.getElementById('message').textContent", returnByValue=True)["result"]["value"]
    time.sleep(2)
    png = call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
    open(shot, "wb").write(base64.b64decode(png))
    print(json.dumps({"first_paint": paint, "first": first, "second": second,
                      "metrics_total_after_second": after_second["total"], "drain_button": drain_msg,
                      "reload_button": reload_msg, "purge_button": purge_msg}, indent=1))
    if not second["scrapes"] > first["scrapes"] >= 2:
        failures.append(f"the page did not keep scraping: {first['scrapes']} then {second['scrapes']}")
    if not second["total"] > first["total"] > 0:
        failures.append(f"the request total did not grow: {first['total']} then {second['total']}")
    if not second["rps"] > 0:
        failures.append(f"requests/s is {second['rps']}")
    if not reload_msg.startswith("reload: done"):
        failures.append(f"the reload button said {reload_msg!r}")
    if not purge_msg.startswith("purge: done"):
        failures.append(f"the purge button said {purge_msg!r}")
    if not second["zones"] or len(second["servers"]) < 2 or second["routes"] < 2:
        failures.append("cache zones, upstream servers or routes missing")
    if failures:
        print("FAILED:\n- " + "\n- ".join(failures))
        sys.exit(1)
    print(f"ok: the page moved and matched /metrics; screenshot in {shot}")
finally:
    browser.terminate()
    browser.wait()
