/* Ask page: the question box. Sending is enabled once the chat backend is wired
 * (#ask[data-state="connected"]); until then the form stays inert. */
(function () {
  "use strict";
  var root = document.getElementById("ask");
  var form = document.getElementById("ask-form");
  var box = document.getElementById("question");
  var submit = document.getElementById("ask-submit");
  if (!root || !form || !box) return;

  function fit() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight + 2, 240) + "px";
  }

  box.addEventListener("input", fit);
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (!submit.disabled) form.requestSubmit(submit);
    }
  });
  form.addEventListener("submit", function (event) {
    if (root.getAttribute("data-state") !== "connected") event.preventDefault();
  });
})();
