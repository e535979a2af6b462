/* Django's two-box picker (filter_horizontal: who may read a folder or a document) puts an aria-label on a bare
 * <span> help icon, a name no assistive technology reads there (axe-core: aria-prohibited-attr); given the role of
 * an image it is read as its name. The picker is built on the page's load event, so new ones are watched for. */
(function () {
  "use strict";
  function named() {
    document.querySelectorAll(".help-tooltip[aria-label]:not([role])").forEach(function (icon) {
      icon.setAttribute("role", "img");
    });
  }
  window.addEventListener("load", function () {
    named();
    new MutationObserver(named).observe(document.body, { childList: true, subtree: true });
  });
})();
