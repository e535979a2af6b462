/* The curated answers desk (chat/curated.html): the list by state over GET /api/curated, and the form that writes
 * or edits one (POST / PUT /api/curated), its citations picked from GET /api/search (the curator's own readable
 * passages: a whole hit, or one of its sentences). ?message=<answer> prefills it from a review item
 * (GET /api/curated/prefill), ?topic=<label>&q=<question>… from a content-gap topic. Text goes in through
 * textContent only; only the viewer's own locators become links. */
(function () {
  "use strict";
  var KB = window.KB, el = KB.el, safeLink = KB.safeLink;
  var gettext = window.gettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }
  var $ = function (id) { return document.getElementById(id); };
  var list = $("curated-list"), form = $("curated-form"), errorLine = $("curated-error"), announcer = $("curated-announce");
  var STATE_LABEL = { draft: gettext("Draft"), approved: gettext("Approved"), stale: gettext("Stale") };
  var state = "";
  var editing = null;  // the answer being edited, or null for a new one
  var cited = [];  // {document_id, document_title, start, end, quote, link}
  var origin = { from_message: null, from_topic: "" };

  function announce(text) { announcer.textContent = text; }
  function when(iso) { return iso ? KB.formatDate(iso, { time: true }) : ""; }

  /* ---------------------------------------------------------------- the list */

  function load() {
    return KB.json("GET", "/api/curated?state=" + encodeURIComponent(state)).then(function (data) {
      var total = 0;
      Object.keys(data.counts).forEach(function (name) {
        total += data.counts[name];
        var count = document.querySelector('#curated-states [data-count="' + name + '"]');
        if (count) count.textContent = String(data.counts[name]);
      });
      document.querySelector('#curated-states [data-count=""]').textContent = String(total);
      var hidden = $("curated-hidden");
      hidden.hidden = !data.hidden;
      hidden.textContent = data.hidden ? interpolate(window.ngettext(
        "%(n)s curated answer cites a document you cannot read, so it is not shown.",
        "%(n)s curated answers cite documents you cannot read, so they are not shown.", data.hidden), { n: data.hidden }, true) : "";
      list.textContent = "";
      if (!data.answers.length) list.appendChild(el("p", "muted", gettext("No curated answers here yet.")));
      data.answers.forEach(function (answer) { list.appendChild(item(answer)); });
    }).catch(function (error) { list.textContent = ""; list.appendChild(el("p", "curated-error", error.message)); });
  }

  function citationList(citations) {
    var ol = el("ol", "curated-item-citations");
    citations.forEach(function (c) {
      var li = el("li", "");
      li.setAttribute("data-number", String(c.number));
      var href = safeLink(c.link);
      var title = el(href ? "a" : "span", "", "[" + c.number + "] " + c.document_title);
      if (href) title.href = href;
      li.appendChild(title);
      li.appendChild(el("blockquote", "review-quote", c.quote));
      ol.appendChild(li);
    });
    return ol;
  }

  function item(answer) {
    var article = el("article", "card curated-item");
    article.setAttribute("data-id", String(answer.id));
    article.setAttribute("data-state", answer.state);
    var head = el("header", "review-head");
    head.appendChild(el("span", "review-status curated-state", STATE_LABEL[answer.state] || answer.state));
    var who = fmt(gettext("written by %(by)s, %(when)s"), { by: answer.created_by, when: when(answer.created_at) });
    if (answer.approved_by) who += " · " + fmt(gettext("approved by %(by)s, %(when)s"), { by: answer.approved_by, when: when(answer.approved_at) });
    head.appendChild(el("p", "review-meta muted", who));
    article.appendChild(head);
    if (answer.state === "stale") article.appendChild(el("p", "curated-stale", gettext("Stale:") + " " + answer.stale_reason));
    var questions = el("ul", "curated-questions");
    questions.setAttribute("aria-label", gettext("Example questions"));
    answer.questions.forEach(function (q) { questions.appendChild(el("li", "", q)); });
    article.appendChild(questions);
    article.appendChild(el("p", "review-answer curated-text", answer.text));
    if (answer.statement) {
      var statement = el("aside", "curated-statement");
      statement.appendChild(el("p", "curated-statement-label", gettext("Support's statement")));
      statement.appendChild(el("p", "", answer.statement));
      article.appendChild(statement);
    }
    article.appendChild(citationList(answer.citations));
    var actions = el("div", "curated-actions");
    if (answer.state !== "approved") actions.appendChild(action(gettext("Approve"), "approve", function () {
      return KB.json("POST", "/api/curated/" + answer.id + "/approve");
    }));
    actions.appendChild(action(gettext("Edit"), "edit", function () { open(answer); return null; }));
    if (answer.state === "approved") actions.appendChild(action(gettext("Retire"), "retire", function () {
      return KB.json("POST", "/api/curated/" + answer.id + "/retire");
    }));
    else actions.appendChild(action(gettext("Delete"), "delete", function () {
      return window.confirm(gettext("Delete this curated answer for good?")) ? KB.json("DELETE", "/api/curated/" + answer.id) : null;
    }));
    var result = el("p", "curated-error");
    result.setAttribute("role", "status");
    article.appendChild(actions);
    article.appendChild(result);
    article._result = result;
    return article;
  }

  function action(label, name, run) {
    var button = el("button", "btn btn-small", label);
    button.type = "button";
    button.setAttribute("data-action", name);
    button.addEventListener("click", function () {
      var request = run();
      if (!request) return;
      button.disabled = true;
      request.then(function () { announce(label + " ✓"); return load(); }).catch(function (error) {
        button.disabled = false;
        button.closest(".curated-item")._result.textContent = error.message;
      });
    });
    return button;
  }

  document.querySelectorAll("#curated-states a").forEach(function (tab) {
    tab.addEventListener("click", function (event) {
      event.preventDefault();
      state = tab.getAttribute("data-state");
      document.querySelectorAll("#curated-states a").forEach(function (t) { t.removeAttribute("aria-current"); });
      tab.setAttribute("aria-current", "page");
      load();
    });
  });

  /* ---------------------------------------------------------------- the form */

  function renderCited() {
    var ol = $("curated-cited");
    ol.textContent = "";
    if (!cited.length) ol.appendChild(el("li", "muted", gettext("No passage cited yet: search below and pick one.")));
    cited.forEach(function (c, i) {
      var li = el("li", "curated-cited");
      li.setAttribute("data-number", String(i + 1));
      var href = safeLink(c.link);
      var title = el(href ? "a" : "span", "", "[" + (i + 1) + "] " + c.document_title);
      if (href) { title.href = href; title.target = "_blank"; title.rel = "noopener"; }
      li.appendChild(title);
      li.appendChild(el("blockquote", "review-quote", c.quote));
      var remove = el("button", "btn btn-small btn-ghost", fmt(gettext("Remove [%(n)s]"), { n: i + 1 }));
      remove.type = "button";
      remove.addEventListener("click", function () { cited.splice(i, 1); renderCited(); });
      li.appendChild(remove);
      ol.appendChild(li);
    });
  }

  function cite(passage) {
    cited.push(passage);
    renderCited();
    announce(fmt(gettext("Cited as [%(n)s]."), { n: cited.length }));
  }

  // A hit's sentences, each with its offset in the document: a citation may quote one rather than the passage.
  function sentences(hit) {
    var found = [], pattern = /[^.!?\n]+(?:[.!?]+|\n|$)/g, match;
    while ((match = pattern.exec(hit.content))) {
      var lead = match[0].length - match[0].replace(/^\s+/, "").length;
      var text = match[0].trim();
      if (text.length > 15) found.push({ text: text, start: hit.start + match.index + lead });
      if (!match[0].length) pattern.lastIndex += 1;
    }
    return found;
  }

  function search() {
    var q = $("curated-search").value.trim();
    var hits = $("curated-hits");
    if (!q) return;
    hits.textContent = "";
    hits.appendChild(el("li", "muted", gettext("Searching…")));
    KB.json("GET", "/api/search?k=8&q=" + encodeURIComponent(q)).then(function (data) {
      hits.textContent = "";
      if (!data.hits.length) hits.appendChild(el("li", "muted", gettext("No passage found in the documents you can read.")));
      data.hits.forEach(function (hit) {
        var li = el("li", "curated-hit");
        li.setAttribute("data-document", String(hit.document_id));
        li.appendChild(el("strong", "", hit.document_title));
        li.appendChild(el("span", "review-cite-crumb", " " + hit.breadcrumb));
        li.appendChild(el("blockquote", "review-quote", hit.content));
        var whole = el("button", "btn btn-small", gettext("Cite this passage"));
        whole.type = "button";
        whole.addEventListener("click", function () {
          cite({ document_id: hit.document_id, document_title: hit.document_title, start: hit.start, end: hit.end, quote: hit.content, link: hit.link });
        });
        li.appendChild(whole);
        var each = el("ul", "curated-sentences");
        sentences(hit).forEach(function (s) {
          var b = el("button", "btn btn-small btn-ghost curated-sentence", s.text);
          b.type = "button";
          b.setAttribute("aria-label", fmt(gettext("Cite only: %(sentence)s"), { sentence: s.text }));
          b.addEventListener("click", function () {
            cite({ document_id: hit.document_id, document_title: hit.document_title, start: s.start, end: s.start + s.text.length,
                   quote: s.text, link: "/documents/" + hit.document_id + "/#char=" + s.start + "," + (s.start + s.text.length) });
          });
          var sli = el("li", "");
          sli.appendChild(b);
          each.appendChild(sli);
        });
        if (each.childNodes.length > 1) li.appendChild(each);
        hits.appendChild(li);
      });
    }).catch(function (error) { hits.textContent = ""; hits.appendChild(el("li", "curated-error", error.message)); });
  }

  function open(answer, prefill) {
    editing = answer || null;
    prefill = prefill || {};
    form.hidden = false;
    errorLine.textContent = "";
    $("curated-form-title").textContent = answer ? gettext("Edit curated answer") : gettext("New curated answer");
    $("curated-questions").value = (answer ? answer.questions : prefill.questions || []).join("\n");
    $("curated-text").value = answer ? answer.text : "";
    $("curated-statement").value = answer ? answer.statement : "";
    cited = (answer ? answer.citations : prefill.citations || []).filter(function (c) { return c.document_id; }).map(function (c) {
      return { document_id: c.document_id, document_title: c.document_title, start: c.start, end: c.end, quote: c.quote, link: c.link };
    });
    if (!answer && cited.length && !$("curated-text").value) {
      $("curated-text").value = cited.map(function (c, i) { return c.quote + " [" + (i + 1) + "]"; }).join("\n\n");
    }
    $("curated-origin").textContent = answer ? "" : origin.from_topic ? fmt(gettext("From the content-gap topic “%(topic)s”"), { topic: origin.from_topic })
      : origin.from_message ? gettext("From an answer on the review desk") : "";
    $("curated-hits").textContent = "";
    renderCited();
    $("curated-questions").focus();
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var approve = event.submitter ? event.submitter.getAttribute("data-approve") === "1" : false;
    var body = {
      text: $("curated-text").value,
      questions: $("curated-questions").value.split("\n").map(function (q) { return q.trim(); }).filter(Boolean),
      citations: cited.map(function (c) { return { document: c.document_id, start: c.start, end: c.end }; }),
      statement: $("curated-statement").value,
      approve: approve
    };
    if (!editing) { body.from_message = origin.from_message; body.from_topic = origin.from_topic; }
    errorLine.textContent = "";
    var request = editing ? KB.json("PUT", "/api/curated/" + editing.id, body) : KB.json("POST", "/api/curated", body);
    request.then(function (saved) {
      form.hidden = true;
      announce(saved.state === "approved" ? gettext("Curated answer saved and approved.") : gettext("Curated answer saved as a draft."));
      return load();
    }).catch(function (error) { errorLine.textContent = error.message; });
  });
  $("curated-cancel").addEventListener("click", function () { form.hidden = true; });
  $("curated-new").addEventListener("click", function () { origin = { from_message: null, from_topic: "" }; open(null); });
  $("curated-search-go").addEventListener("click", search);
  $("curated-search").addEventListener("keydown", function (event) {
    if (event.key === "Enter") { event.preventDefault(); search(); }
  });

  /* ---------------------------------------------------------------- prefilled from the desk or content gaps */

  var params = new URLSearchParams(location.search);
  load();
  if (params.get("message") && /^\d{1,18}$/.test(params.get("message"))) {
    origin.from_message = Number(params.get("message"));
    KB.json("GET", "/api/curated/prefill?message=" + origin.from_message).then(function (data) {
      open(null, { questions: data.question ? [data.question] : [], citations: data.citations });
      if (data.question) $("curated-search").value = data.question;
    }).catch(function (error) { origin.from_message = null; open(null); errorLine.textContent = error.message; });
  } else if (params.get("topic") !== null) {
    origin.from_topic = params.get("topic").slice(0, 300);
    var questions = params.getAll("q");
    open(null, { questions: questions });
    $("curated-search").value = questions[0] || origin.from_topic;
  }
})();
