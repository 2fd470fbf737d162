/* Live tables that re-poll while the page is visible, without htmx's `every 5s [filter]`: a
   trigger filter is JavaScript that htmx evaluates with Function(), which the Content-Security-
   Policy forbids (no 'unsafe-eval'; htmx.config.allowEval is off). htmx then logged
   htmx:evalDisallowedError and treated the filter as true, so hidden tabs polled as well.

   An element with data-refresh-every="<seconds>" and hx-trigger="refresh" gets the event
   "refresh" every <seconds> while document.visibilityState is "visible". A tick that comes while
   the page is hidden asks nothing and leaves the element due; when the page shows again, a due
   element refreshes at once and the ticks go on from there. Each swapped-in element arms itself
   (htmx.onLoad); a failed request leaves the old element in place, which arms again. */
(function () {
  "use strict";
  var SELECTOR = "[data-refresh-every]";
  var timers = new WeakMap();

  function visible() { return document.visibilityState === "visible"; }

  function arm(el) {
    var seconds = parseFloat(el.dataset.refreshEvery);
    window.clearTimeout(timers.get(el));
    if (!(seconds > 0)) { return; }
    timers.set(el, window.setTimeout(function () { tick(el); }, seconds * 1000));
  }

  function tick(el) {
    timers.delete(el);
    if (!el.isConnected) { return; }
    if (!visible()) { el.dataset.refreshDue = "1"; return; }
    window.htmx.trigger(el, "refresh");
  }

  function armWithin(root) {
    if (!root || !root.querySelectorAll) { return; }
    if (root.matches(SELECTOR)) { arm(root); }
    root.querySelectorAll(SELECTOR).forEach(arm);
  }

  window.htmx.onLoad(armWithin);
  document.addEventListener("htmx:afterRequest", function (event) {
    var el = event.detail.elt;
    // Swapped out: the new element armed itself. Still here (an error, no swap): go on polling.
    if (el.matches && el.matches(SELECTOR) && el.isConnected && !timers.has(el)) { arm(el); }
  });
  document.addEventListener("visibilitychange", function () {
    if (!visible()) { return; }
    document.querySelectorAll(SELECTOR + "[data-refresh-due]").forEach(function (el) {
      delete el.dataset.refreshDue;
      window.htmx.trigger(el, "refresh");
    });
  });
})();
