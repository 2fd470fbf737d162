/* Behaviour every page shares, as event listeners instead of inline on*= attributes, so the
   Content-Security-Policy can forbid inline script (portal/security.py):
   - <form data-confirm="question">  asks before it submits;
   - <select data-autosubmit>         submits its form when changed;
   - <input data-check-all="name">    ticks or clears every checkbox called name in its form. */
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) { event.preventDefault(); }
  }, true);
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches("select[data-autosubmit]") && el.form) { el.form.requestSubmit(); }
    if (el.matches("input[data-check-all]") && el.form) {
      el.form.querySelectorAll("input[name='" + el.dataset.checkAll + "']").forEach(function (box) {
        box.checked = el.checked;
      });
    }
  });
})();
