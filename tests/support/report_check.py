#!/usr/bin/env python3
"""Opens a netchaos report in headless Chromium over the DevTools protocol
(--remote-debugging-pipe: no port, nothing listens) and prints one JSON
object: console errors, uncaught exceptions, log errors (CSP violations),
every network request other than the page itself, the counts the page's
root element carries (data-lanes, data-faults, data-requests, data-mode,
data-rendered) and the DOM marks (.lane, .fault-mark, .req-mark), the
tooltip shown when the first fault mark is hovered (and the first request
mark: req_tip), and the time from
navigation to the first drawing. Saves a screenshot.

usage: report_check.py CHROMIUM REPORT.html SCREENSHOT.png [--zoom-requests]

--zoom-requests: also the boxes of the request marks drawn (x, width) at
the whole run and again zoomed in with Ctrl+wheel where the first of them
stands, until the view spans at most 20 ms, with a second screenshot
(SCREENSHOT with -zoomed before .png).

Chromium is killed (its whole process group) however this ends; every wait
is bounded."""
import base64, fcntl, json, os, select, signal, subprocess, sys, tempfile, time

DEADLINE = time.monotonic() + 90


def main():
    chromium, page, shot = sys.argv[1:4]
    zoom = "--zoom-requests" in sys.argv[4:]
    url = "file://" + os.path.abspath(page)
    profile = tempfile.mkdtemp(prefix="netchaos-chromium-")
    # fd 3: commands to Chromium, fd 4: its answers and events.
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def fds():
        # Out of the way first: either end may itself be fd 3 or 4.
        a = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
        b = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
        os.dup2(a, 3)
        os.dup2(b, 4)
        os.setsid()

    args = [chromium, "--headless", "--remote-debugging-pipe", "--no-sandbox",
            "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--metrics-recording-only",
            "--user-data-dir=" + profile, "about:blank"]
    # Its own temporary files (the singleton socket's directory, which a
    # killed Chromium leaves) go in the profile, removed below.
    proc = subprocess.Popen(args, preexec_fn=fds, pass_fds=(3, 4),
                            env=dict(os.environ, TMPDIR=profile),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_r)
    os.close(from_w)
    try:
        out = Cdp(to_w, from_r).check(url, shot, zoom)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        subprocess.run(["rm", "-rf", profile])
    print(json.dumps(out))


class Cdp:
    def __init__(self, w, r):
        self.w, self.r, self.buf, self.n = w, r, b"", 0
        self.events = []

    def read(self):
        """The next message, or a failure past the deadline."""
        while b"\0" not in self.buf:
            left = DEADLINE - time.monotonic()
            if left <= 0:
                raise SystemExit("report_check: Chromium did not answer in time")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise SystemExit("report_check: Chromium closed the pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self.read()
            if m.get("id") == self.n:
                if "error" in m:
                    raise SystemExit(f"report_check: {method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, session):
        for i, m in enumerate(self.events):
            if m.get("method") == method and m.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            m = self.read()
            if m.get("method") == method and m.get("sessionId") == session:
                return m
            self.events.append(m)

    def check(self, url, shot, zoom=False):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(domain + ".enable", {}, s)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False}, s)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, s)
        self.wait_event("Page.loadEventFired", s)

        def js(expr, wait=False):
            r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": wait}, s)
            if "exceptionDetails" in r:
                raise SystemExit(f"report_check: {expr}: {r['exceptionDetails']}")
            return r["result"].get("value")

        while js("document.getElementById('report') && document.getElementById('report').dataset.rendered") is None:
            if time.monotonic() > DEADLINE:
                raise SystemExit("report_check: the page never finished drawing")
            time.sleep(0.05)
        counts = js("""(() => { const r = document.getElementById('report').dataset;
            return {lanes: +r.lanes, faults: +r.faults, requests: +r.requests, mode: r.mode,
                    rendered_ms: +r.rendered,
                    dom_lanes: document.querySelectorAll('.lane').length,
                    dom_faults: document.querySelectorAll('.fault-mark').length,
                    dom_requests: document.querySelectorAll('.req-mark').length,
                    fault_kinds: [...new Set([...document.querySelectorAll('.fault-mark')].map(e => e.dataset.fault))].sort(),
                    end_classes: [...document.querySelectorAll('.lane')].map(e => e.dataset.class),
                    retry_links: document.querySelectorAll('.retry-link').length}; })()""")
        # Hover the first fault mark that is drawn: the tooltip must name it.
        tip = None
        box = js("""(() => { const m = [...document.querySelectorAll('.fault-mark')]
                .find(e => e.getAttribute('visibility') !== 'hidden');
            if (!m) return null; m.scrollIntoView({block: 'center'});
            const b = m.getBoundingClientRect();
            return {x: b.x + b.width / 2, y: b.y + b.height / 2, fault: m.dataset.fault}; })()""")
        if box is None and counts["mode"] == "canvas":
            # Canvas lanes: hover the first fault's position, found by the page's own layout.
            # (Centred: the sticky toolbar covers the top of the window.)
            box = js("""(() => { const cv = document.getElementById('cv');
                cv.scrollIntoView({block: 'center'}); const c = cv.getBoundingClientRect();
                return {x: c.x + c.width / 2, y: c.y + 15, fault: null}; })()""")
        if box is not None:
            self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box["x"], "y": box["y"]}, s)
            time.sleep(0.1)
            tip = js("(() => { const t = document.getElementById('tip'); return {hidden: t.hidden, text: t.textContent}; })()")
            tip["hovered"] = box["fault"]
        # And the first request mark: its tooltip says who answered it.
        req_tip = None
        rbox = js("""(() => { const m = [...document.querySelectorAll('.req-mark')]
                .find(e => e.getAttribute('visibility') !== 'hidden');
            if (!m) return null; m.scrollIntoView({block: 'center'});
            const b = m.getBoundingClientRect();
            return {x: b.x + b.width / 2, y: b.y + b.height / 2}; })()""")
        if rbox is not None:
            self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": rbox["x"], "y": rbox["y"]}, s)
            time.sleep(0.1)
            req_tip = js("(() => { const t = document.getElementById('tip'); return {hidden: t.hidden, text: t.textContent}; })()")
        def screenshot(path):
            data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, s)["data"]
            with open(path, "wb") as f:
                f.write(base64.b64decode(data))

        screenshot(shot)
        req_boxes = None
        if zoom:
            boxes = """(() => [...document.querySelectorAll('.req-mark')]
                .filter(e => e.getAttribute('visibility') !== 'hidden')
                .map(e => { const b = e.getBoundingClientRect(); return [b.x, b.width, b.y]; }))()"""
            span = """(() => { const t = document.getElementById('window').textContent.split(' – ');
                const v = s => s.endsWith(' ms') ? parseFloat(s) / 1000 : s.endsWith(' min') ? parseFloat(s) * 60 : parseFloat(s);
                return v(t[1]) - v(t[0]); })()"""
            more = "[...document.querySelectorAll('.req-more')].map(e => e.textContent)"
            req_boxes = {"whole": js(boxes), "whole_span": js(span), "whole_more": js(more)}
            first = req_boxes["whole"][0] if req_boxes["whole"] else None
            if first is not None:
                for _ in range(80):
                    if js(span) <= 0.02 or time.monotonic() > DEADLINE:
                        break
                    at = js(boxes)
                    x = at[0][0] + at[0][1] / 2 if at else first[0]
                    self.call("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": x, "y": first[2] + 6,
                                                           "deltaX": 0, "deltaY": -100, "modifiers": 2}, s)
                    js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", True)
                req_boxes["zoomed"] = js(boxes)
                req_boxes["zoomed_more"] = js(more)
                req_boxes["zoomed_span"] = js(span)
                screenshot(shot[:-4] + "-zoomed.png" if shot.endswith(".png") else shot + "-zoomed")
        js("0")  # let late events arrive before counting them
        console, exceptions, log, requests = [], [], [], []
        for m in self.events:
            p = m.get("params", {})
            meth = m.get("method")
            if meth == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif meth == "Runtime.exceptionThrown":
                exceptions.append(p.get("exceptionDetails", {}).get("text", "") + " " +
                                  str(p.get("exceptionDetails", {}).get("exception", {}).get("description", "")))
            elif meth == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                log.append(p["entry"].get("text", ""))
            elif meth == "Network.requestWillBeSent":
                u = p.get("request", {}).get("url", "")
                if u != url:
                    requests.append(u)
        try:
            self.call("Browser.close")
        except SystemExit:
            pass
        return {"console_errors": console, "exceptions": exceptions, "log_errors": log,
                "requests": requests, "counts": counts, "tip": tip, "req_tip": req_tip,
                "req_boxes": req_boxes}


if __name__ == "__main__":
    main()
