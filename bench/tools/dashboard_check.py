#!/usr/bin/env python3
"""Checks weir's admin dashboard in headless Chromium, in real time, over the DevTools protocol.

Usage: dashboard_check.py ADMIN_URL SCREENSHOT.png
Loads ADMIN_URL/ while the caller keeps weir under load, reads the numbers the page shows twice,
3 s apart, and checks that they move (requests/s > 0, the request total grows) and that they
match /metrics: the page's total is a value /metrics passed through (not above a scrape made
just after, and within a few seconds of traffic of it). Then presses the reload and purge
buttons and checks what the page reports. Saves a screenshot. Exits 1 on a failed
check, printing why. Needs `chromium` and the `websocket-client` module.
"""
import base64, json, re, subprocess, sys, tempfile, time, urllib.request

import websocket  # websocket-client

admin, shot = sys.argv[1].rstrip("/"), sys.argv[2]
port = 9333
profile = tempfile.mkdtemp(prefix="weir-chromium-")
browser = subprocess.Popen(
    ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
     f"--user-data-dir={profile}", "--window-size=1280,1000", "about:blank"],
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

    def page_values():
        expr = ("JSON.stringify({total: +document.getElementById('total').dataset.value,"
                " rps: +document.getElementById('rps').dataset.value,"
                " hits: +document.getElementById('hits').dataset.value,"
                " scrapes: +document.body.dataset.scrapes,"
                " p99: document.getElementById('p99').textContent,"
                " servers: document.querySelectorAll('#servers tbody tr').length,"
                " zones: document.querySelectorAll('#zones tbody tr').length,"
                " status: document.getElementById('status').textContent})")
        r = call("Runtime.evaluate", expression=expr, returnByValue=True)
        return json.loads(r["result"]["value"])

    def metrics_total():
        text = urllib.request.urlopen(admin + "/metrics").read().decode()
        return sum(float(m.group(2)) for m in re.finditer(r'^weir_http_requests_total\{([^}]*)\} (\S+)$', text, re.M)
                   if 'listener="admin"' not in m.group(1))

    call("Page.enable")
    call("Page.navigate", url=admin + "/")
    time.sleep(3.5)
    first, after_first = page_values(), metrics_total()
    time.sleep(3)
    second, after_second = page_values(), metrics_total()
    # The buttons: reload, and purge (its confirmation answered yes).
    call("Runtime.evaluate", expression="window.confirm = () => true; document.getElementById('reload').click()")
    time.sleep(1)
    reload_msg = call("Runtime.evaluate", expression="document.getElementById('message').textContent", returnByValue=True)["result"]["value"]
    call("Runtime.evaluate", expression="document.getElementById('purge').click()")
    time.sleep(1)
    purge_msg = call("Runtime.evaluate", expression="document.getElementById('message').textContent", returnByValue=True)["result"]["value"]
    png = call("Page.captureScreenshot", format="png")["data"]
    open(shot, "wb").write(base64.b64decode(png))
    print(json.dumps({"first": first, "metrics_after_first": after_first,
                      "second": second, "metrics_after_second": after_second,
                      "reload_button": reload_msg, "purge_button": purge_msg}, indent=1))
    failures = []
    if not second["scrapes"] > first["scrapes"] >= 2:
        failures.append(f"the page did not keep scraping: {first['scrapes']} then {second['scrapes']}")
    if not second["total"] > first["total"] > 0:
        failures.append(f"the request total did not grow: {first['total']} then {second['total']}")
    if not second["rps"] > 0:
        failures.append(f"requests/s is {second['rps']}")
    for shown, after, label in ((first, after_first, "first"), (second, after_second, "second")):
        # The page shows a scrape at most ~1 s old: /metrics read just after is ahead by at most
        # about a second and a half of traffic.
        slack = max(1.5 * shown["rps"], 10)
        if not shown["total"] <= after <= shown["total"] + slack:
            failures.append(f"{label}: page total {shown['total']} vs /metrics {after} (slack {slack:.0f})")
    if not reload_msg.startswith("reload: done"):
        failures.append(f"the reload button said {reload_msg!r}")
    if not purge_msg.startswith("purge: done"):
        failures.append(f"the purge button said {purge_msg!r}")
    if second["zones"] < 1 or second["servers"] < 1:
        failures.append("no cache zone or upstream server listed")
    if failures:
        print("FAILED:\n- " + "\n- ".join(failures))
        sys.exit(1)
    print(f"ok: the page moved and matched /metrics; screenshot in {shot}")
finally:
    browser.terminate()
    browser.wait()
