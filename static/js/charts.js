/* Draws the plotly figures the server embeds as JSON in data-plotly attributes, on page load
   and after every htmx swap. Loaded only on pages with charts, after plotly.js. */
(function () {
  "use strict";
  // The page's language picks plotly's locale: Chinese pages load zh-CN (templates/_charts.html),
  // which translates the toolbar and the date axes; anything else keeps plotly's English.
  var locale = /^zh/i.test(document.documentElement.lang || "") ? "zh-CN" : "en";
  function draw(root) {
    if (!window.Plotly) { return; }
    root.querySelectorAll("[data-plotly]").forEach(function (el) {
      if (el.dataset.drawn) { return; }
      var fig = JSON.parse(el.dataset.plotly);
      window.Plotly.newPlot(el, fig.data, fig.layout, { displaylogo: false, responsive: true, locale: locale });
      el.dataset.drawn = "1";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function (event) { draw(event.target); });
})();
