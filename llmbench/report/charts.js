// Draws every chart of the report from the JSON specs charts.py embeds beside each canvas.
// Animation is off: the page is often opened headless for a screenshot, and a chart must be
// complete on its first frame.
(function () {
  "use strict";
  Chart.defaults.animation = false;
  Chart.defaults.font.family = "system-ui, sans-serif";
  Chart.defaults.maintainAspectRatio = false;

  function fmt(value) {
    if (value === null || value === undefined || !isFinite(value)) return "n/a";
    var size = Math.abs(value);
    if (size >= 100) return Math.round(value).toLocaleString("en-US");
    if (size === 0) return "0";
    if (size < 1e-4) return value > 0 ? "<0.0001" : "-<0.0001";
    var decimals = Math.min(6, Math.max(1, 2 - Math.floor(Math.log10(size))));
    return value.toFixed(decimals);
  }

  function axis(side, stacked) {
    var options = {stacked: stacked, title: {display: !!side.title, text: side.title || ""}};
    if (side.type) options.type = side.type;
    if (side.type === "logarithmic") options.ticks = {callback: function (v) { return fmt(v); }};
    if (side.min !== undefined) options.min = side.min;
    if (side.max !== undefined) options.max = side.max;
    return options;
  }

  function config(spec) {
    var horizontal = !!spec.horizontal;
    var valueUnit = spec.unit ? " " + spec.unit : "";
    var scales = {x: axis(spec.x || {}, !!spec.stacked), y: axis(spec.y || {}, !!spec.stacked)};
    return {
      type: spec.type,
      data: {labels: spec.labels, datasets: spec.datasets.map(function (d) {
        return Object.assign({borderColor: d.color, backgroundColor: d.color, pointRadius: spec.points ? 3 : 0,
                              borderWidth: spec.type === "bar" ? 0 : 1.5, showLine: true}, d);
      })},
      options: {
        indexAxis: horizontal ? "y" : "x",
        interaction: {mode: spec.type === "bar" ? "index" : "nearest", intersect: false},
        parsing: spec.type === "bar" ? undefined : false,
        scales: scales,
        plugins: {
          title: {display: !!spec.title, text: spec.title || ""},
          legend: {position: "bottom"},
          tooltip: {callbacks: {
            label: function (item) {
              var v = spec.type === "bar" ? item.raw : item.parsed.y;
              var extra = spec.type === "bar" ? "" : " at " + fmt(item.parsed.x) + (spec.x.unit ? " " + spec.x.unit : "");
              var tag = item.raw && item.raw.note ? " (" + item.raw.note + ")" : "";
              return item.dataset.label + ": " + fmt(v) + valueUnit + extra + tag;
            },
            footer: function (items) {
              if (!spec.stacked || !items.length) return "";
              var totals = {};
              items.forEach(function (i) {
                var s = i.dataset.stack || "";
                totals[s] = (totals[s] || 0) + (i.raw || 0);
              });
              return Object.keys(totals).map(function (s) {
                return (s ? s + " total: " : "total: ") + fmt(totals[s]) + valueUnit;
              }).join("\n");
            }
          }}
        }
      }
    };
  }

  document.querySelectorAll("script.chart-spec").forEach(function (node) {
    var canvas = document.getElementById(node.dataset.canvas);
    new Chart(canvas, config(JSON.parse(node.textContent)));
  });
})();
