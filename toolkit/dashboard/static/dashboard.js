// jobkit dashboard: the charts (uPlot) and the page's small helpers. No inline scripts anywhere
// (the CSP allows only files from /static); chart data comes as JSON in <script type="application/json">.
(function () {
  "use strict";

  function chart(el, title, xs, ys, color, unit) {
    var opts = {
      width: Math.max(320, el.clientWidth || 560),
      height: 200,
      legend: { show: true },
      scales: { x: { time: true } },
      series: [{}, { label: title, stroke: color, fill: color + "22", width: 1.5,
                     value: function (u, v) { return v == null ? "-" : v.toFixed(unit === "%" ? 1 : 0) + unit; } }],
      axes: [{}, { size: 50 }],
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
    if (t) chart(t, "completed", s.minutes, s.completed, "#2563eb", "");
    if (f) chart(f, "failure rate", s.minutes, rate, "#dc2626", "%");
  }

  function selectAll() {
    var all = document.getElementById("select-all");
    if (!all) return;
    all.addEventListener("change", function () {
      document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
    });
  }

  // htmx requests carry the CSRF token too (for any future hx-post).
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) event.detail.headers["X-CSRF-Token"] = meta.content;
  });

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    selectAll();
  });
})();
