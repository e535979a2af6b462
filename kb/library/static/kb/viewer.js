/* Document viewer: highlight the cited range `#char=start,end` (offsets into the canonical
 * text, counted in Unicode code points as Python counts them) and bring it into view.
 * The article's textContent is exactly the canonical text (see kb/library/viewer.py), so offsets are
 * found by walking its text nodes in order. `&page=N` (PDF sources) points the
 * "Open PDF" link at that page of the original. `&focus=start,end` (the sentence an answer quotes,
 * inside the range) is marked more strongly and brought into view instead of the range's start. Keyboard focus moves
 * to the passage shown, and a passage opened from an answer on the Ask page offers "Back to the answer" (the
 * conversation the reader came from; `&answer=ID` in the link names the answer, shown as `#answer-ID` there). */
(function () {
  "use strict";
  var root = document.getElementById("doc-text");
  if (!root) return;
  var bar = document.getElementById("passage-bar");
  var label = document.getElementById("passage-label");
  var jump = document.getElementById("passage-jump");
  var pdfLink = document.getElementById("pdf-link");
  var back = document.getElementById("passage-back");
  var length = parseInt(root.getAttribute("data-length") || "0", 10);
  // The page's language (Django's JavaScriptCatalog, /jsi18n/, loaded before this file).
  function fmt(text, values) { return window.interpolate(text, values, true); }

  function isHigh(code) { return code >= 0xd800 && code <= 0xdbff; }
  function isLow(code) { return code >= 0xdc00 && code <= 0xdfff; }

  // Code points in s (a surrogate pair is one character, as in Python).
  function cpLength(s) {
    var n = 0;
    for (var i = 0; i < s.length; i++) {
      if (isHigh(s.charCodeAt(i)) && i + 1 < s.length && isLow(s.charCodeAt(i + 1))) i++;
      n++;
    }
    return n;
  }

  // UTF-16 index of the code point at position cp of s.
  function unitIndex(s, cp) {
    var i = 0;
    for (var n = 0; n < cp && i < s.length; n++) {
      i += isHigh(s.charCodeAt(i)) && i + 1 < s.length && isLow(s.charCodeAt(i + 1)) ? 2 : 1;
    }
    return i;
  }

  function parseHash() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
      var eq = pair.indexOf("=");
      if (eq > 0) {
        try { params[decodeURIComponent(pair.slice(0, eq))] = decodeURIComponent(pair.slice(eq + 1)); } catch (e) { /* ignore */ }
      }
    });
    var range = parseRange(params["char"]);
    var focus = range && parseRange(params.focus);
    if (focus && !(range[0] <= focus[0] && focus[1] <= range[1])) focus = null;
    var page = /^\d+$/.test(params.page || "") ? parseInt(params.page, 10) : null;
    var answer = /^\d+$/.test(params.answer || "") ? params.answer : null;
    return { range: range, focus: focus, page: page, answer: answer };
  }

  function parseRange(value) {
    var m = /^(\d+),(\d+)$/.exec(value || "");
    var range = m ? [parseInt(m[1], 10), parseInt(m[2], 10)] : null;
    return range && range[0] < range[1] && range[1] <= length ? range : null;
  }

  function clearMarks() {
    var marks = root.querySelectorAll("mark.hl, mark.hl-focus");  // a passage's marks before those inside it
    for (var i = 0; i < marks.length; i++) {
      var mark = marks[i], parent = mark.parentNode;
      while (mark.firstChild) parent.insertBefore(mark.firstChild, mark);
      parent.removeChild(mark);
      parent.normalize();
    }
  }

  function markRange(a, b, className) {
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    var pos = 0, hits = [], node;
    while ((node = walker.nextNode())) {
      var start = pos, end = pos + cpLength(node.data);
      pos = end;
      if (end <= a) continue;
      if (start >= b) break;
      hits.push([node, Math.max(a, start) - start, Math.min(b, end) - start]);
    }
    hits.forEach(function (hit) {
      var text = hit[0], from = unitIndex(text.data, hit[1]), to = unitIndex(text.data, hit[2]);
      if (from > 0) text = text.splitText(from);
      if (to - from < text.data.length) text.splitText(to - from);
      var mark = document.createElement("mark");
      mark.className = className;
      text.parentNode.insertBefore(mark, text);
      mark.appendChild(text);
    });
  }

  function visibleMarks(selector) {
    return Array.prototype.filter.call(root.querySelectorAll(selector), function (m) {
      return m.getClientRects().length > 0;
    });
  }

  function reveal(smooth) {
    var marks = visibleMarks("mark.hl-focus");
    if (!marks.length) marks = visibleMarks("mark.hl");
    if (!marks.length) return;
    marks[0].classList.add("hl-first");
    marks[0].scrollIntoView({ block: "center", behavior: smooth ? "smooth" : "auto" });
    // The keyboard carries on from the passage (Tab goes to what follows it), and a screen reader reads it.
    marks[0].setAttribute("tabindex", "-1");
    marks[0].focus({ preventScroll: true });
  }

  // The Ask page's conversation this passage was opened from (the referrer, same origin only), else null.
  function answerPage(answer) {
    var from;
    try { from = new URL(document.referrer); } catch (e) { return null; }
    var conversation = from.searchParams.get("c");
    if (from.origin !== location.origin || from.pathname !== "/" || !/^\d+$/.test(conversation || "")) return null;
    return "/?c=" + conversation + (answer ? "#answer-" + answer : "");
  }

  function pageOf(mark) {
    var section = mark && mark.closest("section[data-page]");
    return section ? parseInt(section.getAttribute("data-page"), 10) : null;
  }

  function pointPdfLink(page) {
    if (pdfLink && page) {
      pdfLink.href = pdfLink.getAttribute("data-base") + "#page=" + page;
      pdfLink.textContent = fmt(window.gettext("Open PDF at page %(page)s"), { page: page });
    }
  }

  function apply(smooth) {
    var target = parseHash();
    if (target.range) {
      clearMarks();
      markRange(target.range[0], target.range[1], "hl");
      if (target.focus) markRange(target.focus[0], target.focus[1], "hl-focus");
    } else if (target.page) {
      clearMarks();
      if (bar) bar.hidden = true;
    }
    var marks = root.querySelectorAll("mark.hl");
    if (!marks.length) {
      // `#page=N` alone (a PDF page locator): go to that page of the text.
      var section = target.page && document.getElementById("page-" + target.page);
      if (section) {
        pointPdfLink(target.page);
        section.scrollIntoView({ block: "start", behavior: smooth ? "smooth" : "auto" });
      }
      return;
    }
    var first = pageOf(marks[0]) || target.page;
    // A passage may run on across a page break: name both pages then.
    var last = pageOf(marks[marks.length - 1]);
    var shown = !first ? window.gettext("Showing the cited passage.")
      : last && last !== first ? fmt(window.gettext("Showing the cited passage on pages %(first)s–%(last)s."), { first: first, last: last })
      : fmt(window.gettext("Showing the cited passage on page %(page)s."), { page: first });
    var page = target.page || first;  // where the quoted sentence is, when the link says
    if (bar) {
      bar.hidden = false;
      label.textContent = shown;
    }
    var to = back && answerPage(target.answer);
    if (to) {
      back.href = to;
      back.hidden = false;
    }
    pointPdfLink(page);
    reveal(smooth);
  }

  // Images load from elsewhere at display time; one that cannot be loaded leaves its caption.
  Array.prototype.forEach.call(root.querySelectorAll(".doc-figure img"), function (img) {
    function broken() { img.closest(".doc-figure").classList.add("is-broken"); }
    if (img.complete && !img.naturalWidth) broken();
    img.addEventListener("error", broken);
  });

  /* Pick mode (?pick=<answer id>&role=asker|reviewer&kind=should_answer|wrong, the link a verdict offers): the
   * reader selects the text that answers the answer's question, and "This answers the question" posts the verdict
   * with the document and the selection as offsets into the canonical text (the reverse of markRange), then goes back
   * to the answer. Keyboard: Tab to a paragraph (they are focusable in this mode) and Enter selects it. The question
   * comes from the API, which answers only for an answer the reader may judge. */
  function pickMode() {
    var params = new URLSearchParams(location.search);
    var message = /^\d{1,18}$/.test(params.get("pick") || "") ? params.get("pick") : null;
    var role = params.get("role") === "reviewer" ? "reviewer" : "asker";
    var kind = params.get("kind") === "wrong" ? "wrong" : "should_answer";
    var pickBar = document.getElementById("pick-bar");
    if (!message || !pickBar || !window.KB) return;
    var save = document.getElementById("pick-save"), status = document.getElementById("pick-status");
    var backLink = document.getElementById("pick-back");
    var base = role === "reviewer" ? "/api/review/answers/" + message + "/judgement" : "/api/messages/" + message + "/judgement";
    var picked = null, returnTo = null;

    function reviewPage() {
      var from;
      try { from = new URL(document.referrer); } catch (e) { from = null; }
      return from && from.origin === location.origin && /^\/review\/$/.test(from.pathname) ? from.pathname + from.search : "/review/?filter=all";
    }

    // The code-point offset of a selection boundary in the article's text (its textContent is the canonical text).
    function offsetOf(container, offset) {
      var before = document.createRange();
      before.selectNodeContents(root);
      before.setEnd(container, offset);
      return before.toString();
    }

    function selected() {
      var selection = window.getSelection();
      if (!selection || selection.isCollapsed || !selection.rangeCount) return null;
      var range = selection.getRangeAt(0);
      if (!range.intersectsNode(root)) return null;
      var full = root.textContent;
      var a = root.contains(range.startContainer) ? offsetOf(range.startContainer, range.startOffset).length : 0;
      var b = root.contains(range.endContainer) ? offsetOf(range.endContainer, range.endOffset).length : full.length;
      while (a < b && /\s/.test(full.charAt(a))) a++;
      while (b > a && /\s/.test(full.charAt(b - 1))) b--;
      if (b <= a) return null;
      return { start: cpLength(full.slice(0, a)), end: cpLength(full.slice(0, b)), text: full.slice(a, b) };
    }

    function update() {
      if (save.getAttribute("aria-busy") === "true") return;
      picked = selected();
      save.disabled = !picked;
      var text = picked && picked.text.replace(/\s+/g, " ");
      status.textContent = !picked ? "" : fmt(window.gettext("Selected: “%(text)s”"),
                                              { text: text.length > 120 ? text.slice(0, 117) + "…" : text });
    }

    function selectBlock(block) {
      var range = document.createRange();
      range.selectNodeContents(block);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      update();
    }

    window.KB.json("GET", base + "/pick").then(function (target) {
      pickBar.hidden = false;
      if (bar) bar.hidden = true;
      document.getElementById("pick-question").textContent = target.question;
      returnTo = role === "asker" ? "/?c=" + target.conversation + "#answer-" + message : reviewPage();
      backLink.href = returnTo;
      root.querySelectorAll("p, li, td, th, pre, blockquote, h1, h2, h3, h4, h5, h6, dd").forEach(function (block) {
        if (block.querySelector("p, li, td, pre")) return;  // the innermost blocks only
        block.setAttribute("tabindex", "0");
        block.classList.add("pick-block");
        block.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); selectBlock(block); }
        });
      });
      document.addEventListener("selectionchange", update);
      document.getElementById("pick-label").focus();
    }, function (error) {
      pickBar.hidden = false;
      save.hidden = true;
      document.getElementById("pick-help").hidden = true;
      backLink.hidden = true;
      status.textContent = fmt(window.gettext("This answer cannot be judged here: %(reason)s"), { reason: error.message });
    });

    save.addEventListener("click", function () {
      if (!picked) return;
      var body = { kind: kind, document: Number(pickBar.getAttribute("data-document")), start: picked.start, end: picked.end };
      save.disabled = true;
      save.setAttribute("aria-busy", "true");
      status.textContent = window.gettext("Saving…");
      window.KB.json("POST", base, body).then(function () {
        status.textContent = window.gettext("Saved: the question is remembered for this passage. Going back to the answer…");
        location.assign(returnTo);
      }, function (error) {
        save.setAttribute("aria-busy", "false");
        save.disabled = !picked;
        status.textContent = fmt(window.gettext("Not saved: %(reason)s"), { reason: error.message });
      });
    });
  }

  if (jump) jump.addEventListener("click", function () { reveal(true); });
  window.addEventListener("hashchange", function () {
    var target = parseHash();
    if (target.range || target.page) apply(true);
  });
  apply(false);
  pickMode();
})();
