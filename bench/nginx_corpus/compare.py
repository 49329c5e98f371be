#!/usr/bin/env python3
"""Send the same requests to nginx and to weir for one corpus config and compare the answers.

    compare.py run NAME --nginx HTTP_PORT TLS_PORT --weir HTTP_PORT TLS_PORT --docroot DIR --out FILE.json
    compare.py report OUTDIR            # the table, every difference, the never-served-from-disk check

Compared per request: status, Location (the listening port normalised), Cache-Control, Expires
(as seconds after Date, or "far future"), the body of 2xx answers (JSON echoes of the origin
compared as data, with the X-Forwarded-*/X-Real-IP headers weir adds where nginx set none left
out), and for 101 the origin's X-Echo. Server, Date, Via, ETag, Last-Modified, Connection,
Content-Length and error bodies are not compared. Every request is bounded to 5 s.
"""
import gzip
import json
import os
import socket
import ssl
import sys
import time
from email.utils import parsedate_to_datetime

# name -> (Host of the site, scheme of the site's listener, has an http (redirect) server too)
CONFIGS = {
    "wordpress": ("wordpress.caojietest.com", "tls", False),
    "drupal": ("drupal.example", "http", False),
    "nextcloud": ("cloud.example.com", "tls", True),
    "laravel": ("motc.s2.com", "http", False),
    "symfony": ("symfony.example", "http", False),
    "spa-api": ("127.0.0.1", "http", False),
    "spa-rewrites": ("localhost", "http", False),
    "rails-unicorn": ("3.115.255.57", "http", False),
    "rails-cable": ("realty.example.com", "http", False),
    "django-gunicorn": ("localhost", "http", False),
    "node-websocket": ("curls.margagl.io", "http", False),
    "mastodon": ("example.com", "tls", True),
    "tls-lb": ("mywebsite.com", "tls", True),
    "certbot-static": ("planteria.patraldo.com", "tls", True),
    "certbot-proxy": ("app.miscaminatas.com", "tls", True),
}

WS = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
      "Sec-WebSocket-Version": "13"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSONH = {"Content-Type": "application/json"}

# (method, path, extra headers, body, host override: None = the site's, "" = no Host (HTTP/1.0))
MAIN_REQUESTS = [
    ("GET", "/", {}, None, None),
    ("HEAD", "/", {}, None, None),
    ("GET", "/index.html", {}, None, None),
    ("GET", "/robots.txt", {}, None, None),
    ("GET", "/style.css", {}, None, None),
    ("GET", "/app.js", {"Accept-Encoding": "gzip"}, None, None),
    ("GET", "/assets/app.css", {}, None, None),
    ("GET", "/missing.html", {}, None, None),
    ("GET", "/blog/hello-world/?p=1", {}, None, None),
    ("GET", "/index.php", {}, None, None),
    ("GET", "/info.php?x=1", {}, None, None),
    ("GET", "/index.php/foo/bar?y=2", {}, None, None),
    ("POST", "/index.php", FORM, b"a=1&b=2", None),
    ("GET", "/nonexistent.php", {}, None, None),
    ("GET", "/uploads/pic.jpg/evil.php", {}, None, None),
    ("GET", "/app.php/hello", {}, None, None),
    ("GET", "/remote.php/dav/", {}, None, None),
    ("GET", "/config/config.php", {}, None, None),
    ("GET", "/.env", {}, None, None),
    ("GET", "/.git/config", {}, None, None),
    ("GET", "/.htaccess", {}, None, None),
    ("GET", "/sub", {}, None, None),
    ("GET", "/sub/", {}, None, None),
    ("GET", "/nodir/", {}, None, None),
    ("GET", "/api/users?id=1", {}, None, None),
    ("POST", "/api/items", JSONH, b'{"name":"x"}', None),
    ("GET", "/api", {}, None, None),
    ("GET", "/cc/page", {}, None, None),
    ("GET", "/redirect", {}, None, None),
    ("GET", "/gone", {}, None, None),
    ("GET", "/ws", WS, None, None),
    ("GET", "/socket.io/?EIO=4&transport=websocket", WS, None, None),
    ("GET", "/cable", WS, None, None),
    ("GET", "/api/v1/streaming", WS, None, None),
    ("GET", "/sw.js", {}, None, None),
    ("GET", "/system/file.txt", {}, None, None),
    ("GET", "/packs/app.js", {}, None, None),
    ("GET", "/font.woff2", {}, None, None),
    ("GET", "/.well-known/acme-challenge/token", {}, None, None),
    ("GET", "/.well-known/carddav", {}, None, None),
    ("GET", "/", {"User-Agent": "DavClnt"}, None, None),
    ("GET", "/", {}, None, "unknown.example"),
    ("GET", "/", {}, None, "UPPER"),
    ("GET", "/", {}, None, ""),
]
REDIRECT_SERVER_REQUESTS = [
    ("GET", "/", {}, None, None),
    ("GET", "/some/path?q=1", {}, None, None),
    ("GET", "/.well-known/acme-challenge/token", {}, None, None),
    ("GET", "/", {}, None, "unknown.example"),
]

ADDED_BY_PROXY = {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port", "x-real-ip"}


def send(tls, port, method, path, headers, body, host):
    """One request on its own connection; returns a dict (status 0 and error on failure)."""
    deadline = time.time() + 5
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        s = raw
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            sni = host if host and not host[0].isdigit() else None
            s = ctx.wrap_socket(raw, server_hostname=sni)
        version = "HTTP/1.0" if host == "" else "HTTP/1.1"
        lines = [f"{method} {path} {version}"]
        if host:
            lines.append(f"Host: {host}")
        h = {"User-Agent": "nginx-corpus/1", "Connection": "close"}
        h.update(headers)
        if body is not None:
            h["Content-Length"] = str(len(body))
        lines += [f"{k}: {v}" for k, v in h.items()]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        data = b""
        upgrade = "Upgrade" in headers
        while time.time() < deadline:
            s.settimeout(max(0.1, deadline - time.time()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ssl.SSLError:
                break
            if not chunk:
                break
            data += chunk
            if upgrade and complete(data, method):
                break
        s.close()
    except Exception as e:  # noqa: BLE001 - any failure is an answer to report
        return {"status": 0, "error": f"{type(e).__name__}: {e}", "headers": {}, "body": b""}
    if b"\r\n\r\n" not in data:
        return {"status": 0, "error": f"incomplete answer ({len(data)} bytes)", "headers": {}, "body": b""}
    head, payload = data.split(b"\r\n\r\n", 1)
    hl = head.decode("latin-1").split("\r\n")
    try:
        status = int(hl[0].split(" ")[1])
    except (IndexError, ValueError):
        return {"status": 0, "error": f"bad status line {hl[0]!r}", "headers": {}, "body": b""}
    hdrs = {}
    for line in hl[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            k = k.strip().lower()
            hdrs[k] = (hdrs[k] + ", " + v.strip()) if k in hdrs else v.strip()
    if method == "HEAD" or status in (101, 204, 304):
        payload = b""
    elif "chunked" in hdrs.get("transfer-encoding", "").lower():
        payload = dechunk(payload)
    if hdrs.get("content-encoding", "").lower() == "gzip" and payload:
        try:
            payload = gzip.decompress(payload)
        except OSError:
            pass
    return {"status": status, "headers": hdrs, "body": payload}


def complete(data, method):
    """A whole answer arrived (a kept-alive connection does not close after it)."""
    if b"\r\n\r\n" not in data:
        return False
    head, payload = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").lower().split("\r\n")
    if lines[0].split(" ")[1:2] in (["101"], ["204"], ["304"]) or method == "HEAD":
        return True
    for line in lines[1:]:
        if line.startswith("content-length:"):
            return len(payload) >= int(line.split(":", 1)[1])
        if line.startswith("transfer-encoding:") and "chunked" in line:
            return payload.endswith(b"0\r\n\r\n")
    return False


def dechunk(b):
    out = b""
    while b:
        line, _, rest = b.partition(b"\r\n")
        try:
            n = int(line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def norm_location(loc, port):
    if not loc:
        return None
    return loc.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT").replace(f":{port}/", ":PORT/")


def norm_expires(h):
    exp = h.get("expires")
    if not exp:
        return None
    try:
        e = parsedate_to_datetime(exp)
        d = parsedate_to_datetime(h["date"]) if "date" in h else None
    except (TypeError, ValueError, IndexError):
        return f"unparsable {exp}"
    if e.year >= 2037:
        return "far future"
    if d is None:
        return "present"
    delta = (e - d).total_seconds()
    return f"+{round(delta / 10) * 10:.0f}s"


def norm_echo(text, other):
    """The origin's JSON echo as data; weir-added forwarding headers nginx did not send are dropped."""
    try:
        a = json.loads(text)
        b = json.loads(other) if other else {}
    except (ValueError, TypeError):
        return None
    if not isinstance(a, dict) or "origin" not in a:
        return None
    bh = b.get("hdr", {}) if isinstance(b, dict) else {}
    a["hdr"] = {k: v for k, v in a.get("hdr", {}).items() if k not in ADDED_BY_PROXY or k in bh}
    return a


def summary(r, port):
    h = r["headers"]
    body = r["body"]
    snip = body[:4000].decode("utf-8", "replace")
    return {"status": r["status"], "error": r.get("error"), "location": norm_location(h.get("location"), port),
            "cache_control": h.get("cache-control"), "expires": norm_expires(h), "x_echo": h.get("x-echo"),
            "body": snip, "body_len": len(body)}


def compare(n, w, nport, wport, method):
    diffs = []
    if n["status"] != w["status"]:
        diffs.append("status")
    if norm_location(n["headers"].get("location"), nport) != norm_location(w["headers"].get("location"), wport):
        diffs.append("location")
    if n["headers"].get("cache-control") != w["headers"].get("cache-control"):
        diffs.append("cache-control")
    if norm_expires(n["headers"]) != norm_expires(w["headers"]):
        diffs.append("expires")
    if n["status"] == 101 and w["status"] == 101:
        ne = norm_echo(n["headers"].get("x-echo", ""), n["headers"].get("x-echo", ""))
        we = norm_echo(w["headers"].get("x-echo", ""), n["headers"].get("x-echo", ""))
        if ne != we:
            diffs.append("upgrade-echo")
    if 200 <= n["status"] < 300 and n["status"] == w["status"] and method != "HEAD":
        nb, wb = n["body"], w["body"]
        ne = norm_echo(nb.decode("utf-8", "replace"), nb.decode("utf-8", "replace"))
        if ne is not None:
            if ne != norm_echo(wb.decode("utf-8", "replace"), nb.decode("utf-8", "replace")):
                diffs.append("body")
        elif nb.strip() != wb.strip():
            diffs.append("body")
    return diffs


def disk_files(root):
    files = {}
    for d, _, names in os.walk(root):
        for f in names:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            if data:
                files[data] = os.path.relpath(p, root)
    return files


def served_from_disk(n, w, files):
    """weir answered 200 from disk where nginx refused (4xx/5xx, `internal` answers 404) or ran PHP."""
    wb = w["body"]
    if w["status"] == 200 and b"<?php" in wb and not (n["status"] == 200 and n["body"] == wb):
        return f"weir sent PHP source where nginx answered {n['status']}"
    if w["status"] != 200 or wb not in files:
        return None
    if n["status"] >= 400:
        return f"nginx refused ({n['status']}), weir answered 200 with the bytes of {files[wb]}"
    if n["status"] == 200 and n["body"].startswith(b"PHP-RAN"):
        return f"nginx ran PHP, weir answered 200 with the bytes of {files[wb]}"
    return None


def run(argv):
    name = argv[0]
    opts = {}
    i = 1
    while i < len(argv):
        if argv[i] in ("--nginx", "--weir"):
            opts[argv[i][2:]] = (int(argv[i + 1]), int(argv[i + 2]))
            i += 3
        else:
            opts[argv[i][2:]] = argv[i + 1]
            i += 2
    host, scheme, redirect_server = CONFIGS[name]
    files = disk_files(opts["docroot"])
    plan = [("main", r) for r in MAIN_REQUESTS]
    if redirect_server:
        plan += [("http", r) for r in REDIRECT_SERVER_REQUESTS]
    results = []
    for where, (method, path, headers, body, hovr) in plan:
        tls = where == "main" and scheme == "tls"
        idx = 1 if tls else 0
        h = host if hovr is None else (host.upper() if hovr == "UPPER" else hovr)
        np_, wp = opts["nginx"][idx], opts["weir"][idx]
        n = send(tls, np_, method, path, headers, body, h)
        w = send(tls, wp, method, path, headers, body, h)
        label = f"{'https' if tls else 'http'} {method} {path}"
        if headers.get("Upgrade"):
            label += " [Upgrade: websocket]"
        if "User-Agent" in headers:
            label += f" [User-Agent: {headers['User-Agent']}]"
        if "Accept-Encoding" in headers:
            label += " [Accept-Encoding: gzip]"
        if hovr is not None:
            label += " [HTTP/1.0, no Host]" if hovr == "" else f" [Host: {h}]"
        diffs = compare(n, w, np_, wp, method)
        results.append({"request": label, "diffs": diffs, "nginx": summary(n, np_), "weir": summary(w, wp),
                        "flag": served_from_disk(n, w, files)})
    with open(opts["out"], "w") as fh:
        json.dump({"config": name, "results": results}, fh, indent=1)
    same = sum(1 for r in results if not r["diffs"])
    print(f"{name}: {len(results)} requests, {same} same, {len(results) - same} different")


def answer(a):
    s = f"{a['status']}"
    if a.get("error"):
        s += f" ({a['error']})"
    if a.get("location"):
        s += f" Location: {a['location']}"
    if a.get("cache_control"):
        s += f" Cache-Control: {a['cache_control']}"
    if a.get("expires"):
        s += f" Expires: {a['expires']}"
    if a.get("body") and 200 <= a["status"] < 300:
        s += f" body: `{a['body'][:100]}`".replace("\n", "\\n")
    return s.replace("|", "\\|")


def body_delta(n, w):
    """The lines (PHP dump) or JSON keys (origin echo) that differ, for a body difference."""
    try:
        a, b = json.loads(n), json.loads(w)
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b))
            out = []
            for k in keys:
                if k == "hdr":
                    ah, bh = a.get("hdr", {}), b.get("hdr", {})
                    for h in sorted(set(ah) | set(bh)):
                        if ah.get(h) != bh.get(h) and not (h in ADDED_BY_PROXY and h not in ah):
                            out.append(f"header {h}: nginx {ah.get(h)!r}, weir {bh.get(h)!r}")
                elif a.get(k) != b.get(k):
                    out.append(f"{k}: nginx {a.get(k)!r}, weir {b.get(k)!r}")
            return "; ".join(out)
    except (ValueError, TypeError):
        pass
    nl, wl = n.splitlines(), w.splitlines()
    if nl and wl and nl[0].startswith("PHP-RAN") and wl[0].startswith("PHP-RAN"):
        nd = dict(l.split("=", 1) for l in nl[1:] if "=" in l)
        wd = dict(l.split("=", 1) for l in wl[1:] if "=" in l)
        out = [f"{k}: nginx {nd.get(k)!r}, weir {wd.get(k)!r}" for k in nd if nd.get(k) != wd.get(k)]
        if nl[0] != wl[0]:
            out.insert(0, f"nginx `{nl[0]}`, weir `{wl[0]}`")
        return "; ".join(out)
    return f"nginx `{n[:80]}`, weir `{w[:80]}`".replace("\n", "\\n")


def guess_cause(name, r):
    """A one-line guess at the cause of a difference (rules written after reading the results)."""
    n, w, req = r["nginx"], r["weir"], r["request"]
    delta = ""
    if "body" in r["diffs"]:
        delta = body_delta(n["body"], w["body"])
    elif "upgrade-echo" in r["diffs"]:
        delta = body_delta(n["x_echo"] or "", w["x_echo"] or "")
    if w["status"] == 0:
        return "test artifact of an import problem: weir did not start (the config `weir import` wrote fails `weir check`, see below)"
    if n["status"] == 0:
        return "nginx did not answer"
    if w["status"] == 503 and n["status"] != 503:
        return "an untranslated directive made weir's route refuse with 503 (fail closed; see the import notes below)"
    if name == "rails-unicorn" and w["status"] in (301, 403, 404):
        return "untranslated directive: server-level `try_files $uri/index.html $uri @unicorn` (listed: \"outside a location\"); weir serves the root as plain static, nginx proxies misses to @unicorn"
    if req.endswith("GET /sub") and n["status"] == 301 and w["status"] == 200:
        return "weir behaviour: `try_files $uri $uri/ /index.php` on a directory without a slash: nginx redirects to /sub/, weir runs the front controller"
    if w["status"] == 403 and n["status"] == 200:
        return "import: an `index` name another location runs (index.php) is left out of the static route, with the names after it (listed), so a directory answers 403 where nginx runs or serves its index"
    if "/.env" in req or "/.git/" in req or "/.htaccess" in req:
        return "weir behaviour: static never serves dotfiles (the config as found has no `deny` for them; nginx serves the file)"
    if "POST /api/items" in req and w["status"] == 405:
        return "weir behaviour: a static route answers POST with 405 (nginx falls through try_files / serves the file)"
    if n["status"] in (200, 404) and w["status"] == 101:
        return "weir behaviour: weir passes `Upgrade` to the origin where the location has no `proxy_set_header Upgrade` (nginx drops it)"
    if "location" in r["diffs"] and n["location"] and w["location"] and w["location"].startswith("/") and n["location"].endswith(w["location"]):
        return "weir behaviour: a relative redirect stays relative; nginx's is absolute with its port (`absolute_redirect on`)"
    if req.endswith("GET /api") and n["status"] == 301:
        return "nginx behaviour not translated: a `location /api/` with `proxy_pass` redirects `/api` to `/api/`"
    if "x-real-ip: nginx" in delta:
        return "import: `proxy_set_header X-Real-IP $remote_addr` dropped without a note on stderr"
    if "header proxy: nginx None, weir ''" in delta:
        return "import/weir: `proxy_set_header Proxy \"\"` means *omit* in nginx; weir sends an empty `Proxy:` header"
    if "host: nginx '127.0.0.1:" in delta:
        return "weir behaviour: weir forwards the client's Host; nginx sends `$proxy_host` when the config sets no `Host`"
    if "HTTP_HOST" in delta or "host: nginx" in delta:
        return "weir behaviour: Host normalised (lower-cased; HTTP/1.0 without Host gets the listener/upstream address, nginx the server_name or none)"
    if "DOCUMENT_URI" in delta:
        return "FastCGI params: DOCUMENT_URI is nginx's `$document_uri` after the try_files redirect (/index.php); weir passes the request path"
    if "PATH_INFO" in delta or "CONTENT_TYPE" in delta:
        return "FastCGI params: weir sends PATH_INFO empty (nginx's fastcgi_params none) and no CONTENT_TYPE (nginx an empty one)"
    if "cache-control" in r["diffs"] or "expires" in r["diffs"]:
        return "untranslated directive: `expires max` (listed as a caching hint; weir sends no max-age/Expires)"
    if n["status"] == 403 and w["status"] in (200, 503):
        return "directory without index: nginx 403 after `try_files $uri/`; weir falls to the next try_files entry"
    return "?"


def report(outdir):
    causes = {}
    cpath = os.path.join(os.path.dirname(os.path.abspath(__file__)), "causes.json")
    if os.path.exists(cpath):
        with open(cpath) as fh:
            causes = json.load(fh)
    rows, diffs, flags = [], [], []
    tot = tot_same = 0
    for name in CONFIGS:
        p = os.path.join(outdir, f"{name}.json")
        if not os.path.exists(p):
            rows.append((name, 0, 0, 0, "not run (see the log)"))
            continue
        with open(p) as fh:
            res = json.load(fh)["results"]
        same = sum(1 for r in res if not r["diffs"])
        rows.append((name, len(res), same, len(res) - same, ""))
        tot += len(res)
        tot_same += same
        for r in res:
            if r["diffs"]:
                cause = causes.get(f"{name} {r['request']}") or guess_cause(name, r)
                diffs.append((name, r, cause))
            if r["flag"]:
                flags.append((name, r))
    print("| config | requests | same | different |")
    print("|---|---:|---:|---:|")
    for name, n, s, d, note in rows:
        print(f"| {name} | {n} | {s} | {d} |{(' ' + note) if note else ''}")
    pct = 100.0 * tot_same / tot if tot else 0.0
    print(f"| **total** | {tot} | {tot_same} ({pct:.1f}%) | {tot - tot_same} |")
    print()
    print("## Never served from disk where nginx refuses, runs PHP or keeps it internal")
    print()
    if flags:
        for name, r in flags:
            print(f"- **FLAG** {name}: {r['request']}: {r['flag']}")
            print(f"  - nginx: {answer(r['nginx'])}")
            print(f"  - weir: {answer(r['weir'])}")
    else:
        print("No request: weir never answered 200 with a file's bytes where nginx did not, and never sent PHP source.")
    print()
    print("## Differences")
    print()
    last = None
    for name, r, cause in diffs:
        if name != last:
            print(f"### {name}")
            print()
            last = name
        print(f"- `{r['request']}` ({', '.join(r['diffs'])})")
        print(f"  - nginx: {answer(r['nginx'])}")
        print(f"  - weir: {answer(r['weir'])}")
        if "body" in r["diffs"] or "upgrade-echo" in r["diffs"]:
            if "body" in r["diffs"]:
                delta = body_delta(r["nginx"]["body"], r["weir"]["body"])
            else:
                delta = body_delta(r["nginx"]["x_echo"] or "", r["weir"]["x_echo"] or "")
            print(f"  - differs: {delta}".replace("|", "\\|"))
        print(f"  - cause: {cause}")
    return 1 if flags else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2:])
    elif sys.argv[1] == "report":
        sys.exit(report(sys.argv[2]))
    else:
        sys.exit(__doc__)
