/* The boost-or-hide form (search/admin.py, AdjustmentForm) lists the passages of the document chosen: choosing
 * another document reloads the add form with it, keeping what was typed in the other fields. */
(function () {
  "use strict";
  window.addEventListener("load", function () {
    var select = document.querySelector("select[data-adjustment-document]");
    if (!select || !/\/add\/$/.test(window.location.pathname)) {
      return;
    }
    select.addEventListener("change", function () {
      var params = new URLSearchParams(window.location.search);
      params.set("document", select.value);
      ["action", "reason"].forEach(function (name) {
        var field = select.form.querySelector("[name=" + name + "]:checked, textarea[name=" + name + "]");
        if (field && field.value) {
          params.set(name, field.value);
        }
      });
      window.location.search = params.toString();
    });
  });
})();
