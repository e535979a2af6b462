/* Helpers shared by the Ask page and the review desk. Text goes in through textContent only,
 * and only the viewer's own locators ever become links. */
(function () {
  "use strict";

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function csrf() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function safeLink(link) {
    return typeof link === "string" && /^\/documents\/\d+\/(#[A-Za-z0-9=,&]*)?$/.test(link) ? link : null;
  }

  window.KB = { el: el, csrf: csrf, safeLink: safeLink };
})();
