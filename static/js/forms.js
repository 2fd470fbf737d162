/* Live validation swaps only the feedback next to each field (see jobs/_job_form_feedback.html);
   mark the field itself invalid or valid so Pico draws its border, without touching its value. */
(function () {
  "use strict";
  function mark(root) {
    root.querySelectorAll(".feedback[data-for]").forEach(function (box) {
      var input = document.getElementById(box.dataset.for);
      if (!input) { return; }
      if (box.dataset.invalid === "true") {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", box.id);
      } else {
        input.removeAttribute("aria-invalid");
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { mark(document); });
  document.addEventListener("htmx:afterSettle", function () { mark(document); });
})();
