// netchaos report: draws the timeline from the JSON in #data.
//
// Up to DOM_LIMIT connections every lane, phase, fault and request is an SVG
// element (class lane / fault-mark / req-mark; tests count them). Beyond
// that the lanes go on one canvas, several connections per row when there
// are many (the row says how many), drawn only where the page is scrolled
// to. Either way #report carries data-lanes (connections), data-faults
// (fault marks) and data-requests, and data-rendered (ms after navigation
// start when the first drawing was done).
(function () {
  "use strict";
  var DOM_LIMIT = 1500;
  var LABEL_W = 150;
  var data = JSON.parse(document.getElementById("data").textContent);
  var conns = data.conns;
  var root = document.getElementById("report");
  var tip = document.getElementById("tip");
  var mode = conns.length > DOM_LIMIT ? "canvas" : "dom";
  root.setAttribute("data-mode", mode);

  var end = Math.max(data.end, 0.001);
  var view = { t0: 0, t1: end * 1.02 };
  var width = 1000;

  function fmtT(t) {
    if (Math.abs(t) < 1) return (t * 1000).toFixed(t < 0.01 ? 2 : 0) + " ms";
    if (Math.abs(t) < 120) return t.toFixed(2) + " s";
    return (t / 60).toFixed(1) + " min";
  }
  // Precise enough that ticks `step` apart read differently (5.000, 5.002 s).
  function fmtStep(t, step) {
    var d = function (unit) { return Math.max(0, Math.ceil(-Math.log10(step / unit) - 1e-9)); };
    if (Math.abs(t) < 1) return (t * 1000).toFixed(Math.max(t < 0.01 ? 2 : 0, d(0.001))) + " ms";
    if (Math.abs(t) < 120) return t.toFixed(Math.max(2, d(1))) + " s";
    return (t / 60).toFixed(Math.max(1, d(60))) + " min";
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function x(t) {
    return LABEL_W + ((t - view.t0) / (view.t1 - view.t0)) * (width - LABEL_W - 10);
  }
  function tAt(px) {
    return view.t0 + ((px - LABEL_W) / (width - LABEL_W - 10)) * (view.t1 - view.t0);
  }
  function closeOf(c) {
    return c.close === null ? end : c.close;
  }
  // Short names for the fault marks' labels.
  var ABBR = {
    latency: "L", bandwidth: "B", slicer: "S", stall: "St", reset: "R", close: "C",
    slow_close: "SC", respond: "Rp", loss: "Lo", blackout: "Bo", refuse: "Rf",
    connect_timeout: "CT", connect_delay: "CD", http_status: "H", http_delay: "HD",
    sse: "E", http_truncate: "HT", http_abort: "HA"
  };
  var ENDS = {
    ok: "ok (FIN)", reset: "reset (RST)", truncated: "truncated (clean close by a fault)",
    timeout: "timed out", refused: "refused", failed: "failed", aborted: "aborted / disabled",
    open: "still open"
  };

  // Connection numbers restart in each log: with several, lanes say which.
  function name(c) {
    return (data.runs > 1 ? "log " + (c.run + 1) + " " : "") + "#" + c.id;
  }
  function connText(c) {
    var lines = ["connection " + name(c) + " " + c.client + " → " + c.dst,
      "opened " + fmtT(c.open) + (c.close === null ? ", still open" : ", lived " + fmtT(c.close - c.open)),
      "ended: " + c.outcome + " (" + (ENDS[c.class] || c.class) + ")"];
    if (c.resolve) lines.push("resolved its name in " + fmtT(c.resolve[1] - c.resolve[0]) + " (" + c.resolve[2] + "), " +
      fmtT(-c.resolve[1]) + " before it opened");
    if (c.dial !== null) lines.push("upstream connected after " + fmtT(c.dial));
    if (c.redials) lines.push("upstream (HTTP/2) sent its connection away and was dialled again: " +
      c.redials + (c.redials === 1 ? " time" : " times"));
    if (c.first_down !== null) lines.push("first byte to the client after " + fmtT(c.first_down));
    lines.push("bytes: " + c.bytes_up + " up, " + c.bytes_down + " down" + (c.path ? " (" + c.path + ")" : ""));
    if (c.prev !== null) {
      var p = conns[c.prev];
      lines.push("follows " + name(p) + " (same client host and destination), " +
        fmtT(c.open - closeOf(p)) + " after it ended");
    }
    c.errors.forEach(function (e) { lines.push("error: " + e); });
    return lines;
  }
  function faultText(c, f) {
    return ["fault " + f.fault + " (rule " + f.rule + (f.direction ? ", " + f.direction : "") + ")",
      "at " + fmtStep(f.t, 0.001) + (f.request !== null ? " on request " + f.request : ""),
      f.params ? "params: " + f.params : "no parameters"].concat([""], connText(c));
  }
  function answerText(r) {
    var text = httpAnswerText(r);
    return r.grpc === null ? text : text + "; gRPC status " + r.grpc;
  }
  function httpAnswerText(r) {
    var st = r.status === null ? "?" : r.status;
    if (!r.injected) return "status " + st + " from the upstream";
    if (r.upstream !== null) {
      return r.status === null ?
        "no response: the upstream answered " + r.upstream + ", netchaos aborted the connection instead" :
        "status " + st + " injected by netchaos in place of the upstream's " + r.upstream;
    }
    return r.status === null ? "no response: aborted by netchaos (the upstream never saw it)" :
      "status " + st + " injected by netchaos (the upstream never saw it)";
  }
  function reqText(c, r) {
    return ["request " + r.n + ": " + r.method + " " + r.path,
      answerText(r),
      r.faults.length ? "HTTP faults: " + r.faults.join(", ") : "no HTTP fault",
      "at " + fmtStep(r.t, 0.001)].concat(r.retried ? ["a retry: the same request failed before it on this connection"] : [],
      [""], connText(c));
  }
  function showTip(lines, ev) {
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    var tx = ev.clientX + 14, ty = ev.clientY + 14;
    if (tx + 420 > window.innerWidth) tx = Math.max(0, ev.clientX - 430);
    tip.style.left = tx + "px";
    tip.style.top = ty + "px";
  }
  function hideTip() { tip.hidden = true; }

  // ---- the axis, the bands and the activity strip (both modes) ----
  var axis = document.getElementById("axis");
  var activity = document.getElementById("activity");
  function ticks() {
    var span = view.t1 - view.t0, raw = span / 8;
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * p; }).find(function (s) { return s >= raw; });
    var out = [];
    for (var t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) out.push(t);
    out.step = step;
    return out;
  }
  function bandsSvg(h) {
    var s = "";
    data.windows.forEach(function (b, i) {
      var a = Math.max(x(b.from), LABEL_W), z = Math.min(x(b.until === null ? view.t1 : b.until), width);
      if (z <= a) return;
      s += '<rect class="band band' + (i % 3) + '" x="' + a + '" y="0" width="' + (z - a) + '" height="' + h +
        '"><title>' + esc(b.label) + "</title></rect>";
    });
    return s;
  }
  function drawAxis() {
    var s = '<svg width="' + width + '" height="38">' + bandsSvg(38);
    data.windows.forEach(function (b) {
      var a = x(b.from);
      if (a >= LABEL_W && a < width) s += '<text class="bandlabel" x="' + (a + 2) + '" y="10">' + esc(b.label) + "</text>";
    });
    var ts = ticks();
    ts.forEach(function (t) {
      var px = x(t);
      s += '<line class="tick" x1="' + px + '" x2="' + px + '" y1="26" y2="38"/><text class="ticklabel" x="' + px +
        '" y="24" text-anchor="middle">' + fmtStep(t, ts.step) + "</text>";
    });
    s += '<text class="ticklabel" x="4" y="24">time since start</text></svg>';
    axis.innerHTML = s;
  }
  function drawActivity() {
    var w = width, h = 40, bins = Math.max(20, Math.floor((w - LABEL_W) / 4));
    var open = new Array(bins).fill(0), faults = new Array(bins).fill(0);
    var dt = (view.t1 - view.t0) / bins;
    conns.forEach(function (c) {
      var a = Math.floor((c.open - view.t0) / dt), z = Math.floor((closeOf(c) - view.t0) / dt);
      for (var i = Math.max(a, 0); i <= Math.min(z, bins - 1); i++) open[i]++;
      c.faults.forEach(function (f) {
        var i = Math.floor((f.t - view.t0) / dt);
        if (i >= 0 && i < bins) faults[i]++;
      });
    });
    var mo = Math.max(1, Math.max.apply(null, open)), mf = Math.max(1, Math.max.apply(null, faults));
    activity.width = w;
    activity.height = h;
    var g = activity.getContext("2d");
    g.clearRect(0, 0, w, h);
    g.fillStyle = "#333";
    g.font = "11px sans-serif";
    g.fillText("open (line, max " + mo + ")", 4, 14);
    g.fillText("faults (bars, max " + mf + ")", 4, 30);
    var bw = (w - LABEL_W - 10) / bins;
    g.fillStyle = "#d62728";
    for (var i = 0; i < bins; i++) {
      var fh = (faults[i] / mf) * (h - 4);
      if (fh > 0) g.fillRect(LABEL_W + i * bw, h - fh, Math.max(1, bw - 1), fh);
    }
    g.strokeStyle = "#1f4e8c";
    g.lineWidth = 1.5;
    g.beginPath();
    for (var j = 0; j < bins; j++) {
      var yy = h - 2 - (open[j] / mo) * (h - 6);
      if (j === 0) g.moveTo(LABEL_W, yy); else g.lineTo(LABEL_W + j * bw + bw / 2, yy);
    }
    g.stroke();
  }

  // ---- end shapes, for SVG and canvas alike (readable without colour) ----
  function endPath(cls, px, cy, r) {
    switch (cls) {
      case "ok": return "M" + (px - r) + "," + cy + "a" + r + "," + r + " 0 1,0 " + 2 * r + ",0a" + r + "," + r + " 0 1,0 " + -2 * r + ",0";
      case "reset": return "M" + (px - r) + "," + (cy - r) + "L" + (px + r) + "," + (cy + r) + "M" + (px + r) + "," + (cy - r) + "L" + (px - r) + "," + (cy + r);
      case "truncated": return "M" + (px - r) + "," + (cy - r) + "h" + 2 * r + "v" + 2 * r + "h" + -2 * r + "z";
      case "timeout": return "M" + (px - r) + "," + (cy - r) + "h" + 2 * r + "L" + (px - r) + "," + (cy + r) + "h" + 2 * r + "z";
      case "refused": return "M" + px + "," + (cy - r) + "L" + (px + r) + "," + cy + "L" + px + "," + (cy + r) + "L" + (px - r) + "," + cy + "z";
      case "open": return "M" + (px - r) + "," + (cy - r) + "L" + (px + r) + "," + cy + "L" + (px - r) + "," + (cy + r);
      default: return "M" + px + "," + (cy - r) + "v" + 2 * r + "M" + (px - r) + "," + cy + "h" + 2 * r;
    }
  }
  function faultPath(px, top) {
    return "M" + (px - 4) + "," + top + "h8l-4,6z";
  }

  // ---- DOM mode: SVG lanes ----
  var LANE_H = 16;
  var lanesBox = document.getElementById("lanes");
  function drawDom() {
    var rows = [], y = 0, laneY = new Array(conns.length);
    var groupOf = -1;
    conns.forEach(function (c, i) {
      if (c.group !== groupOf) {
        groupOf = c.group;
        var n = conns.filter(function (d) { return d.group === c.group; }).length;
        rows.push('<text class="group" x="4" y="' + (y + 12) + '">' + esc(data.groups[c.group]) + " — " + n +
          " connection" + (n === 1 ? "" : "s") + "</text>");
        y += LANE_H;
      }
      laneY[i] = y;
      y += LANE_H;
    });
    var h = y + 4;
    var s = '<svg id="lanesvg" width="' + width + '" height="' + h + '">' +
      '<defs><pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
      '<line x1="0" y1="0" x2="0" y2="4" class="hatchline"/></pattern></defs>' + bandsSvg(h) + rows.join("");
    var clip = function (v) { return Math.max(LABEL_W, Math.min(width, v)); };
    conns.forEach(function (c, i) {
      var cy = laneY[i] + LANE_H / 2, a = c.open, z = closeOf(c);
      var g = '<g class="lane ' + c.class + '" data-conn="' + c.id + '" data-i="' + i + '" data-class="' + c.class + '">';
      g += '<rect class="lanebg" x="0" y="' + laneY[i] + '" width="' + width + '" height="' + LANE_H + '"/>';
      g += '<text class="lanelabel" x="8" y="' + (cy + 4) + '">' + esc(name(c)) + " " + esc(c.client) + "</text>";
      var dialEnd = c.dial !== null ? a + c.dial : (c.class === "refused" || c.class === "timeout" || c.class === "failed" ? z : a);
      var fb = c.first_down !== null ? a + c.first_down : null;
      var seg = function (cls, t0, t1, hh) {
        var p0 = clip(x(t0)), p1 = clip(x(t1));
        if (p1 - p0 <= 0 && !(t1 > t0 && p0 > LABEL_W && p0 < width)) return "";
        return '<rect class="ph ' + cls + '" x="' + p0 + '" y="' + (cy - hh / 2) + '" width="' + Math.max(1, p1 - p0) + '" height="' + hh + '"/>';
      };
      if (c.resolve) g += seg("ph-resolve", a + c.resolve[0], a + c.resolve[1], 4);
      if (dialEnd > a) g += seg("ph-connect", a, dialEnd, 10);
      if (fb !== null) {
        if (fb > dialEnd) g += seg("ph-wait", dialEnd, fb, 3);
        g += seg("ph-transfer", fb, z, 8);
      } else if (z > dialEnd) {
        g += seg("ph-wait", dialEnd, z, 3);
      }
      if (c.activity && c.activity.bucket > 0) {
        // Bytes over time: bars above the lane (down) and below it (up),
        // their height on a log scale of the busiest bucket.
        var act = c.activity, top = 1;
        act.down.concat(act.up).forEach(function (b) { top = Math.max(top, b); });
        [[act.down, -1], [act.up, 1]].forEach(function (pair) {
          pair[0].forEach(function (b, k) {
            if (!b) return;
            var t0 = a + act.start + k * act.bucket, p0 = clip(x(t0)), p1 = clip(x(t0 + act.bucket));
            if (p1 <= p0) return;
            var hh = 1 + 5 * Math.log(1 + b) / Math.log(1 + top);
            g += '<rect class="act" x="' + p0 + '" y="' + (pair[1] < 0 ? cy - 4 - hh : cy + 4) + '" width="' + Math.max(1, p1 - p0 - 0.5) +
              '" height="' + hh + '"/>';
          });
        });
      }
      var ex = x(z);
      if (ex >= LABEL_W && ex <= width) g += '<path class="endmark ' + c.class + '" d="' + endPath(c.class, ex, cy, 4) + '"/>';
      // Requests at (nearly) the same moment (1 ms apart on a run of
      // minutes) go side by side, a pixel between them, each hoverable;
      // zoomed in, they stand at their own times. A crowd that would push
      // its last mark more than 40 px from its time is cut short there,
      // with "+N" for the rest (zoom in to see them).
      var lastReq = -1e9, folded = 0, foldAt = 0;
      var flush = function () {
        if (folded) g += '<text class="req-more" x="' + (foldAt + 4) + '" y="' + (cy + 4) + '">+' + folded + "</text>";
        folded = 0;
      };
      c.requests.forEach(function (r, k) {
        var at = x(r.t), px = Math.max(at, lastReq + 5);
        if (px < LABEL_W || px > width) return;
        if (at > lastReq + 5) flush();
        if (px - at > 40) {
          folded++;
          foldAt = lastReq;
          return;
        }
        lastReq = px;
        g += '<rect class="req-mark' + (r.injected ? " injected" : "") + (r.retried ? " retried" : "") + '" data-k="' + k +
          '" x="' + (px - 2) + '" y="' + (cy - 6) + '" width="4" height="12"/>';
      });
      flush();
      var lastPx = -1e9;
      c.faults.forEach(function (f, k) {
        // Marks at (nearly) the same moment go side by side, each hoverable;
        // the tooltip has the exact time.
        var px = Math.max(x(f.t), lastPx + 9);
        var hidden = px < LABEL_W || px > width;
        if (!hidden) lastPx = px;
        g += '<path class="fault-mark" data-fault="' + esc(f.fault) + '" data-k="' + k + '"' + (hidden ? ' visibility="hidden"' : "") +
          ' d="' + faultPath(hidden ? LABEL_W : px, laneY[i]) + '"/>';
        if (!hidden && view.t1 - view.t0 < end * 0.5) {
          g += '<text class="faultlabel" x="' + (px + 5) + '" y="' + (laneY[i] + 7) + '">' + esc(ABBR[f.fault] || f.fault) + "</text>";
        }
      });
      g += "</g>";
      if (c.prev !== null) {
        var p = conns[c.prev], px0 = clip(x(closeOf(p))), px1 = clip(x(a)), y0 = laneY[c.prev] + LANE_H / 2;
        g = '<path class="retry-link" d="M' + px0 + "," + y0 + " C" + (px0 + 12) + "," + y0 + " " + (px1 - 12) + "," + cy + " " + px1 + "," + cy +
          '"/>' + g;
      }
      s += g;
    });
    s += "</svg>";
    lanesBox.innerHTML = s;
  }
  lanesBox.addEventListener("mousemove", function (ev) {
    if (mode !== "dom") return;
    var el = ev.target.closest ? ev.target.closest(".fault-mark, .req-mark, .lane") : null;
    if (!el) return hideTip();
    var lane = el.closest(".lane");
    var c = conns[+lane.getAttribute("data-i")];
    if (el.classList.contains("fault-mark")) showTip(faultText(c, c.faults[+el.getAttribute("data-k")]), ev);
    else if (el.classList.contains("req-mark")) showTip(reqText(c, c.requests[+el.getAttribute("data-k")]), ev);
    else showTip(connText(c), ev);
  });
  lanesBox.addEventListener("mouseleave", hideTip);

  // ---- canvas mode: rows of one or more connections, drawn where scrolled ----
  var ROW_H = 10;
  var perRow = Math.max(1, Math.ceil(conns.length / 1000));
  var rows = [];
  var COLORS = {
    ok: "#2a7f2a", reset: "#c0392b", truncated: "#d68910", timeout: "#7d3c98", refused: "#1f618d",
    failed: "#555", aborted: "#999", open: "#17a2b8"
  };
  function layoutRows() {
    rows = [];
    var i = 0;
    while (i < conns.length) {
      var g = conns[i].group, j = i;
      while (j < conns.length && conns[j].group === g) j++;
      rows.push({ group: g, n: j - i });
      for (var k = i; k < j; k += perRow) {
        var list = [];
        for (var m = k; m < Math.min(j, k + perRow); m++) list.push(m);
        rows.push({ list: list });
      }
      i = j;
    }
    document.getElementById("spacer").style.height = Math.max(0, rows.length * ROW_H - canvasH()) + "px";
    document.getElementById("perrow").textContent = perRow === 1 ? "one connection per lane" :
      perRow + " connections per lane (overlaid; darker = more)";
  }
  var scroller = document.getElementById("scroller");
  var cv = document.getElementById("cv");
  function canvasH() { return Math.min(rows.length * ROW_H + 2, Math.max(200, Math.floor(window.innerHeight * 0.7))); }
  function drawCanvas() {
    var h = canvasH();
    cv.width = width;
    cv.height = h;
    var g = cv.getContext("2d");
    g.clearRect(0, 0, width, h);
    var first = Math.floor(scroller.scrollTop / ROW_H), off = scroller.scrollTop - first * ROW_H;
    data.windows.forEach(function (b, i) {
      var a = Math.max(x(b.from), LABEL_W), z = Math.min(x(b.until === null ? view.t1 : b.until), width);
      if (z > a) {
        g.fillStyle = ["rgba(255,200,0,0.12)", "rgba(0,150,255,0.10)", "rgba(200,0,200,0.08)"][i % 3];
        g.fillRect(a, 0, z - a, h);
      }
    });
    var alpha = perRow === 1 ? 1 : Math.max(0.15, 1 / Math.sqrt(perRow));
    g.font = "10px sans-serif";
    for (var r = first; r < rows.length && (r - first) * ROW_H - off < h; r++) {
      var row = rows[r], y = (r - first) * ROW_H - off, cy = y + ROW_H / 2;
      if (row.group !== undefined) {
        g.globalAlpha = 1;
        g.fillStyle = "#222";
        g.font = "bold 10px sans-serif";
        g.fillText(data.groups[row.group] + " — " + row.n + " connections", 4, y + ROW_H - 1);
        g.font = "10px sans-serif";
        continue;
      }
      var c0 = conns[row.list[0]], cl = conns[row.list[row.list.length - 1]];
      g.globalAlpha = 1;
      g.fillStyle = "#444";
      g.fillText(row.list.length === 1 ? "#" + c0.id : "#" + c0.id + "–#" + cl.id + " (" + row.list.length + ")", 8, y + ROW_H - 1);
      g.save();
      g.beginPath();
      g.rect(LABEL_W, 0, width - LABEL_W, h);
      g.clip();
      g.globalAlpha = alpha;
      row.list.forEach(function (i) {
        var c = conns[i], a = x(c.open), z = x(closeOf(c));
        var d = c.dial !== null ? x(c.open + c.dial) : a;
        var fb = c.first_down !== null ? x(c.open + c.first_down) : null;
        if (z < LABEL_W || a > width) return;
        if (c.resolve) {
          g.fillStyle = "#2ca02c";
          var r0 = x(c.open + c.resolve[0]), r1 = x(c.open + c.resolve[1]);
          g.fillRect(r0, cy - 1, Math.max(1, r1 - r0), 2);
        }
        g.fillStyle = "#888";
        if (d > a) g.fillRect(a, cy - 3, Math.max(1, d - a), 6);
        g.fillStyle = "#666";
        g.fillRect(d, cy - 0.5, Math.max(1, (fb === null ? z : fb) - d), 1);
        if (fb !== null) {
          g.fillStyle = "#4a6fa5";
          g.fillRect(fb, cy - 2.5, Math.max(1, z - fb), 5);
        }
        g.strokeStyle = COLORS[c.class] || "#555";
        g.lineWidth = 1.5;
        g.stroke(new Path2D(endPath(c.class, z, cy, 3)));
      });
      g.globalAlpha = 1;
      g.fillStyle = "#d62728";
      row.list.forEach(function (i) {
        conns[i].faults.forEach(function (f) {
          var px = x(f.t);
          if (px >= LABEL_W && px <= width) g.fill(new Path2D("M" + (px - 3) + "," + y + "h6l-3,4z"));
        });
      });
      g.restore();
    }
  }
  function canvasHit(ev) {
    var rect = cv.getBoundingClientRect(), px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    var r = Math.floor((py + scroller.scrollTop) / ROW_H), row = rows[r];
    if (!row || !row.list) return hideTip();
    var best = null, bd = 6;
    row.list.forEach(function (i) {
      conns[i].faults.forEach(function (f) {
        var d = Math.abs(x(f.t) - px);
        if (d < bd) { bd = d; best = faultText(conns[i], f); }
      });
    });
    if (!best) {
      var t = tAt(px);
      var hit = row.list.filter(function (i) { return conns[i].open <= t && closeOf(conns[i]) >= t; });
      var c = conns[(hit.length ? hit : row.list)[0]];
      best = connText(c);
      if (row.list.length > 1) best.unshift(row.list.length + " connections in this lane; " + hit.length + " open at " + fmtT(t), "");
    }
    showTip(best, ev);
  }

  // ---- zoom and pan (both modes) ----
  function redraw() {
    width = Math.max(600, document.getElementById("timeline").clientWidth - 4);
    var step = ticks().step;
    document.getElementById("window").textContent = fmtStep(view.t0, step) + " – " + fmtStep(view.t1, step);
    drawAxis();
    drawActivity();
    if (mode === "dom") drawDom(); else drawCanvas();
  }
  var pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; redraw(); });
  }
  function zoom(f, at) {
    var span = view.t1 - view.t0, c = at === undefined ? view.t0 + span / 2 : at;
    var ns = Math.min(end * 1.02, Math.max(span * f, 1e-4));
    var t0 = c - (c - view.t0) * (ns / span);
    view.t0 = Math.max(0, Math.min(t0, end * 1.02 - ns));
    view.t1 = view.t0 + ns;
    schedule();
  }
  document.getElementById("zin").onclick = function () { zoom(0.5); };
  document.getElementById("zout").onclick = function () { zoom(2); };
  document.getElementById("zreset").onclick = function () { view = { t0: 0, t1: end * 1.02 }; schedule(); };
  var tl = document.getElementById("timeline");
  tl.addEventListener("wheel", function (ev) {
    if (!(ev.ctrlKey || ev.altKey)) return;
    ev.preventDefault();
    var rect = tl.getBoundingClientRect();
    zoom(ev.deltaY > 0 ? 1.25 : 0.8, tAt(ev.clientX - rect.left));
  }, { passive: false });
  var drag = null;
  tl.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, t0: view.t0, t1: view.t1 }; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (ev) {
    if (!drag || ev.buttons !== 1) return;
    var dt = ((drag.x - ev.clientX) / (width - LABEL_W - 10)) * (drag.t1 - drag.t0);
    var span = drag.t1 - drag.t0;
    view.t0 = Math.max(0, Math.min(drag.t0 + dt, end * 1.02 - span));
    view.t1 = view.t0 + span;
    schedule();
  });
  window.addEventListener("resize", schedule);

  if (mode === "canvas") {
    document.getElementById("canvasmode").hidden = false;
    var sel = document.getElementById("rowsel");
    [1, 5, 25, 100, perRow].filter(function (v, i, a) { return a.indexOf(v) === i; }).sort(function (a, b) { return a - b; })
      .forEach(function (v) {
        var o = document.createElement("option");
        o.value = v;
        o.textContent = v === 1 ? "1 connection per lane" : v + " connections per lane";
        if (v === perRow) o.selected = true;
        sel.appendChild(o);
      });
    sel.onchange = function () { perRow = +sel.value; layoutRows(); schedule(); };
    scroller.addEventListener("scroll", schedule);
    cv.addEventListener("mousemove", canvasHit);
    cv.addEventListener("mouseleave", hideTip);
    layoutRows();
  } else {
    scroller.hidden = true;
  }
  redraw();
  root.setAttribute("data-rendered", String(Math.round(performance.now())));
})();
