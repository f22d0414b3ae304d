// jobkit dashboard: the charts (uPlot) and the page's small helpers. No inline scripts anywhere
// (the CSP allows only files from /static); chart data comes as JSON in <script type="application/json">.
(function () {
  "use strict";

  var REFRESH_MS = 5000;
  var PAUSED_KEY = "jobkit.dashboard.refresh-paused";

  function css(name, fallback) {
    var v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  // ---- charts --------------------------------------------------------------------------------
  function chart(el, title, xs, ys, color, unit) {
    var text = css("--muted", "#6b7280"), line = css("--line", "#e5e7eb");
    var axis = { stroke: text, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 } };
    var opts = {
      width: Math.max(320, el.clientWidth || 560),
      height: 200,
      legend: { show: true },
      scales: { x: { time: true } },
      series: [{}, { label: title, stroke: color, fill: color + "22", width: 1.5,
                     value: function (u, v) { return v == null ? "-" : v.toFixed(unit === "%" ? 1 : 0) + unit; } }],
      axes: [axis, Object.assign({ size: 50 }, axis)],
    };
    return new uPlot(opts, [xs, ys], el);
  }

  function drawCharts() {
    var source = document.getElementById("series");
    if (!source || typeof uPlot === "undefined") return;
    var s = JSON.parse(source.textContent);
    var rate = s.minutes.map(function (_, i) {
      var tried = s.completed[i] + s.failed[i];
      return tried ? (100 * s.failed[i]) / tried : null;
    });
    var t = document.getElementById("chart-throughput");
    var f = document.getElementById("chart-failures");
    if (t) chart(t, "completed", s.minutes, s.completed, css("--accent", "#2563eb"), "");
    if (f) chart(f, "failure rate", s.minutes, rate, css("--bad", "#dc2626"), "%");
  }

  // ---- times: "3 min ago" re-worded as the page stays open; countdowns to the next run --------
  function span(seconds) {
    if (seconds < 1) return "now";
    var units = [[86400, "d"], [3600, "h"], [60, "min"]];
    for (var i = 0; i < units.length; i++) {
      if (seconds >= units[i][0]) return Math.floor(seconds / units[i][0]) + " " + units[i][1];
    }
    return Math.floor(seconds) + " s";
  }

  function ago(date) {
    var seconds = (Date.now() - date.getTime()) / 1000;
    var text = span(Math.abs(seconds));
    if (text === "now") return text;
    return seconds >= 0 ? text + " ago" : "in " + text;
  }

  function countdown(date) {
    var left = Math.round((date.getTime() - Date.now()) / 1000);
    if (left <= 0) return "due now";
    var h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    return "in " + (h ? h + ":" + two(m) : m) + ":" + two(s);
  }

  function retime() {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      el.textContent = el.classList.contains("countdown") ? countdown(date) : ago(date);
    });
  }

  // ---- selection and copying -----------------------------------------------------------------
  function selectAll() {
    var all = document.getElementById("select-all");
    if (!all) return;
    all.addEventListener("change", function () {
      document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
    });
  }

  function copied(button) {
    button.classList.add("copied");
    button.textContent = "copied";
    setTimeout(function () { button.classList.remove("copied"); button.textContent = "copy"; }, 1200);
  }

  function copy(button) {
    var text = button.getAttribute("data-copy");
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { copied(button); }, function () { fallbackCopy(button, text); });
    } else {
      fallbackCopy(button, text);
    }
  }

  function fallbackCopy(button, text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    try { if (document.execCommand("copy")) copied(button); } finally { document.body.removeChild(area); }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.copy");
    if (button) { event.preventDefault(); copy(button); }
  });

  // ---- the jobs list: keyboard and auto-refresh ----------------------------------------------
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#jobs tbody tr[data-id]")); }

  function current() { return document.querySelector("#jobs tbody tr.current"); }

  function setCurrent(row) {
    var was = current();
    if (was) { was.classList.remove("current"); was.removeAttribute("aria-selected"); }
    if (!row) return;
    row.classList.add("current");
    row.setAttribute("aria-selected", "true");
    if (row.scrollIntoView) row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var at = all.indexOf(current());
    var next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
    setCurrent(all[next]);
  }

  function toggle(row) {
    var box = row && row.querySelector("input.pick");
    if (box) box.checked = !box.checked;
  }

  function retrySelection() {
    var form = document.getElementById("selection");
    if (!form) return;
    if (!document.querySelector("input.pick:checked")) toggle(current());
    if (!document.querySelector("input.pick:checked")) return;
    var button = form.querySelector('button[value="retry"]');
    if (form.requestSubmit) form.requestSubmit(button); else button.click();  // to the confirmation page
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(target.tagName));
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape" && typing(event.target)) { event.target.blur(); return; }
    if (typing(event.target) || !document.getElementById("jobs")) return;
    var handled = true;
    switch (event.key) {
      case "/": {
        var field = document.querySelector("#filter select, #filter input");
        if (field) field.focus();
        break;
      }
      case "j": move(1); break;
      case "k": move(-1); break;
      case "x": toggle(current()); break;
      case "Enter": {
        var link = current() && current().querySelector("a[href]");
        if (link) window.location.href = link.href; else handled = false;
        break;
      }
      case "r": retrySelection(); break;
      default: handled = false;
    }
    if (handled) event.preventDefault();
  });

  function paused() {
    try { return window.localStorage.getItem(PAUSED_KEY) === "1"; } catch (e) { return false; }
  }

  function setPaused(value) {
    try { window.localStorage.setItem(PAUSED_KEY, value ? "1" : "0"); } catch (e) { /* private mode */ }
    showPaused();
  }

  function showPaused() {
    var button = document.getElementById("refresh-toggle");
    var state = document.getElementById("refresh-state");
    if (!button) return;
    button.setAttribute("aria-pressed", paused() ? "true" : "false");
    button.textContent = paused() ? "Resume auto-refresh" : "Pause auto-refresh";
    if (state) state.textContent = paused() ? "auto-refresh paused" : "auto-refresh every 5 s";
  }

  function refresh(live) {
    if (paused() || document.hidden) return;
    var keep = {
      checked: Array.prototype.map.call(document.querySelectorAll("input.pick:checked"), function (b) { return b.value; }),
      open: rows().filter(function (r) { return r.querySelector("details[open]"); }).map(function (r) { return r.dataset.id; }),
      current: current() ? current().dataset.id : null,
    };
    fetch(live.getAttribute("data-refresh"), { credentials: "same-origin", headers: { accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (paused()) return;  // paused while the request was out
        live.innerHTML = html;
        rows().forEach(function (row) {
          var box = row.querySelector("input.pick");
          if (box && keep.checked.indexOf(box.value) >= 0) box.checked = true;
          var details = row.querySelector("details");
          if (details && keep.open.indexOf(row.dataset.id) >= 0) details.open = true;
          if (row.dataset.id === keep.current) row.classList.add("current");
        });
        selectAll();
        retime();
        live.setAttribute("data-refreshed", String(Date.now()));
        var state = document.getElementById("refresh-state");
        if (state) state.textContent = "refreshed " + new Date().toLocaleTimeString();
      })
      .catch(function (error) {
        var state = document.getElementById("refresh-state");
        if (state) state.textContent = "refresh failed (" + error.message + "): reload the page";
      });
  }

  function autoRefresh() {
    var live = document.querySelector("#live[data-refresh]");
    var button = document.getElementById("refresh-toggle");
    if (!live || !button) return;
    button.addEventListener("click", function () { setPaused(!paused()); });
    showPaused();
    setInterval(function () { refresh(live); }, REFRESH_MS);
  }

  // htmx requests carry the CSRF token too (for any future hx-post).
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) event.detail.headers["X-CSRF-Token"] = meta.content;
  });
  document.addEventListener("htmx:afterSwap", retime);

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    selectAll();
    autoRefresh();
    retime();
    setInterval(retime, 1000);
  });
})();
