/* Behaviour every page shares, as event listeners instead of inline on*= attributes, so the
   Content-Security-Policy can forbid inline script (portal/security.py):
   - <form data-confirm="question">  asks before it submits;
   - <select data-autosubmit>         submits its form when changed;
   - <input data-check-all="name">    ticks or clears every checkbox called name in its form;
   - <button data-copy="id">          copies the text of element #id (a tunnel command) and says
                                      so with its data-copied label;
   - <select data-keep-choice>        a list htmx re-reads (the loan form's lenders) keeps the
                                      choice made while the read was on its way, if still offered. */
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
  var kept = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !target.querySelectorAll) { return; }
    target.querySelectorAll("select[data-keep-choice]").forEach(function (select) {
      if (select.id && select.value) { kept[select.id] = select.value; }
    });
  });
  document.addEventListener("htmx:load", function (event) {
    var root = event.detail.elt;
    if (!root || !root.querySelectorAll) { return; }
    root.querySelectorAll("select[data-keep-choice]").forEach(function (select) {
      var value = kept[select.id];
      delete kept[select.id];
      if (value && Array.prototype.some.call(select.options, function (o) { return o.value === value; })) {
        select.value = value;
      }
    });
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    var source = button && document.getElementById(button.dataset.copy);
    if (!source || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      if (button.dataset.copied) { button.textContent = button.dataset.copied; }
    });
  });
})();
