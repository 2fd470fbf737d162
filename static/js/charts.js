/* Draws the plotly figures the server embeds as JSON in data-plotly attributes, on page load
   and after every htmx swap. Loaded only on pages with charts, after plotly.js. */
(function () {
  "use strict";
  function draw(root) {
    if (!window.Plotly) { return; }
    root.querySelectorAll("[data-plotly]").forEach(function (el) {
      if (el.dataset.drawn) { return; }
      var fig = JSON.parse(el.dataset.plotly);
      window.Plotly.newPlot(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
      el.dataset.drawn = "1";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function (event) { draw(event.target); });
})();
