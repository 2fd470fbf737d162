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
  /* Fields for one kind of job (fieldset[data-kind], e.g. autoscaling for inference): shown and
     sent only while that kind is chosen (a disabled fieldset's inputs are not submitted). */
  function showForKind() {
    var kind = document.getElementById("id_kind");
    if (!kind) { return; }
    document.querySelectorAll("fieldset[data-kind]").forEach(function (set) {
      var off = set.dataset.kind !== kind.value;
      set.hidden = off;
      set.disabled = off;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    mark(document);
    showForKind();
    var kind = document.getElementById("id_kind");
    if (kind) { kind.addEventListener("change", showForKind); }
  });
  document.addEventListener("htmx:afterSettle", function () { mark(document); });
  /* The live check swaps in the options of a list that depends on other fields (the priority
     classes), each marked `selected` as the server read the choice. htmx inserts the new options
     before removing the old ones, and the browser's choice does not survive that: it ended on the
     last option ("best-effort"), so every job from the form ran best-effort (issue 32 item 1).
     Choose again what the answer marks. */
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    var list = event.detail.target;
    if (!list || list.tagName !== "SELECT") { return; }
    var marked = list.querySelector("option[selected]");
    if (marked) { list.value = marked.value; }
  });
})();
