/* Helpers shared by the Ask page and the review desk, the review desk's verdict buttons among them (the Ask page's
 * thumbs are feedback.js). Text goes in through textContent only, and only the viewer's own locators ever become
 * links. */
(function () {
  "use strict";
  // The page's language (Django's JavaScriptCatalog, /jsi18n/, loaded before this file).
  var gettext = window.gettext, ngettext = window.ngettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }

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

  function failure(kind, message, reference) {
    var error = new Error(message);
    error.kind = kind;
    error.reference = reference || null;
    return error;
  }

  // A page's request sent to the sign-in page instead (the session ended; Django's login_required).
  function signedOut(response) { return response.redirected && /\/accounts\/login\//.test(response.url); }

  // Why a request failed, in words a reader can act on: never a status code, an exception's text or "CSRF".
  // error.kind: "session" (signed out: sign in again), "expired" (the page's form token is stale: reload it),
  // "network" (the server was not reached: try again), "server" (our fault; error.reference is what the admin
  // finds in the log, kb.errors) or "refused" (the server's own sentence, written for people).
  function refusal(response, data) {
    var detail = data && typeof data.detail === "string" ? data.detail : "";
    if (response.status === 401 || signedOut(response)) {
      return failure("session", gettext("Your session has ended, so nothing was sent. Sign in again to continue."));
    }
    if (response.status === 403 && /csrf/i.test(detail)) {
      return failure("expired", gettext("This page has expired, so nothing was sent. Reload the page and try again."));
    }
    if (response.status >= 500) {
      var reference = data && typeof data.reference === "string" && /^[0-9a-f]{4,32}$/.test(data.reference) ? data.reference : null;
      if (reference) return failure("server", fmt(gettext("Something went wrong on our side. If it keeps happening, give your administrator this reference: %(reference)s."), { reference: reference }), reference);
      if (response.status === 503 && detail) return failure("server", detail); // the outage's sentence (kb.outage)
      return failure("server", gettext("The server could not handle this just now. Try again in a moment."));
    }
    return failure("refused", detail || gettext("The request was not accepted."));
  }

  // A JSON request (a write with the session's CSRF token; `headers` added to every request's own); rejects with an
  // error from `refusal`, or of kind "network" when the server was not reached.
  function json(method, url, body, headers) {
    var options = { method: method, credentials: "same-origin", headers: Object.assign({ Accept: "application/json" }, headers) };
    if (method !== "GET") options.headers["X-CSRFToken"] = csrf();
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    return fetch(url, options).catch(function () {
      throw failure("network", gettext("The server could not be reached. Check your connection and try again."));
    }).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (data) {
        if (!response.ok || signedOut(response)) throw refusal(response, data);
        return data;
      });
    });
  }

  var VERDICTS = [["helpful", gettext("Helpful")], ["wrong", gettext("Wrong")], ["should_refuse", gettext("Should have refused")],
                  ["should_answer", gettext("Should have answered")]];
  var REFUSAL_VERDICTS = [["helpful", gettext("Right not to answer")], ["should_answer", gettext("Should have answered")]];

  /* A reviewer's verdict on an answer (the review desk), as a group of toggle buttons, one per verdict kind:
   * POST `url` {kind}, DELETE `url` when the chosen one is pressed again. "Should have answered" (and, once given,
   * "wrong": "Name the passage that answers it") opens a search over the documents the judge may read (GET
   * /api/search), to name the one that answers, and offers "Pick the passage": the document viewer in pick mode
   * (kb/library/static/kb/viewer.js), where the judge selects the text that answers and the verdict is saved with it.
   * options: url, key (unique in the page), refused, question, judgement (or null), showNamed (default true:
   * the document it names, under the buttons), onSaved(judgement or null), onError(message). Returns the element. */
  function judge(options) {
    var current = options.judgement ? options.judgement.kind : null;
    var wrap = el("div", "turn-judge");
    var group = el("div", "turn-rating");
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", options.refused ? gettext("Judge this refusal") : gettext("Judge this answer"));
    group.appendChild(el("span", "muted", options.refused ? gettext("Was it right not to answer?") : gettext("Was this helpful?")));
    (options.refused ? REFUSAL_VERDICTS : VERDICTS).forEach(function (choice) {
      var button = el("button", "rate", choice[1]);
      button.type = "button";
      button.setAttribute("data-kind", choice[0]);
      button.setAttribute("aria-pressed", current === choice[0] ? "true" : "false");
      button.addEventListener("click", function () {
        if (choice[0] === "should_answer" && current !== choice[0]) { documentPicker(options, wrap, "should_answer"); return; }
        var request = current === choice[0] ? json("DELETE", options.url).then(function () { return null; })
                                             : json("POST", options.url, { kind: choice[0] });
        request.then(options.onSaved, function (error) { options.onError(error.message); });
      });
      group.appendChild(button);
    });
    wrap.appendChild(group);
    if (current === "wrong" && pickTarget(options.url)) {
      var name = el("button", "btn btn-small btn-ghost judge-name-passage", gettext("Name the passage that answers it"));
      name.type = "button";
      name.addEventListener("click", function () { documentPicker(options, wrap, "wrong"); });
      wrap.appendChild(name);
    }
    var named = options.showNamed !== false && options.judgement && options.judgement.document;
    if (named) {
      var line = el("p", "judge-named muted", gettext("Answerable from:") + " ");
      var link = el(safeLink(named.link) ? "a" : "span", "", named.title);
      if (safeLink(named.link)) link.href = named.link;
      line.appendChild(link);
      wrap.appendChild(line);
    }
    return wrap;
  }

  // The answer and the judge's role a verdict URL names (/api/messages/ID/judgement: the asker's), for pick mode.
  function pickTarget(url) {
    var match = /^\/api\/(review\/answers|messages)\/(\d+)\/judgement$/.exec(url || "");
    return match ? { message: match[2], role: match[1] === "messages" ? "asker" : "reviewer" } : null;
  }

  // The viewer in pick mode for `document`, at the passage `link` (a search hit's locator) when there is one.
  function pickLink(url, documentId, kind, link) {
    var target = pickTarget(url);
    if (!target) return null;
    var at = safeLink(link) ? link.slice(link.indexOf("#")) : "";
    return "/documents/" + documentId + "/?pick=" + target.message + "&role=" + target.role + "&kind=" + kind +
           (at.charAt(0) === "#" ? at : "");
  }

  function documentPicker(options, wrap, kind) {
    var old = wrap.querySelector(".judge-document");
    if (old) { old.querySelector("input[type=search]").focus(); return; }
    var id = "judge-doc-" + options.key;
    var form = el("form", "judge-document");
    form.noValidate = true;
    var label = el("label", "", gettext("Which document answers it? (optional)"));
    label.htmlFor = id;
    var input = el("input");
    input.type = "search";
    input.id = id;
    input.value = options.question || "";
    input.maxLength = 1000;
    var find = el("button", "btn btn-small btn-ghost", gettext("Find documents"));
    find.type = "button";
    var choices = el("fieldset", "judge-choices");
    choices.appendChild(el("legend", "visually-hidden", gettext("Documents you can read")));
    var save = el("button", "btn btn-small", kind === "wrong" ? gettext("Save: wrong") : gettext("Save: should have answered"));
    save.type = "submit";
    var pick = el("a", "btn btn-small btn-ghost judge-pick", gettext("Pick the passage"));
    pick.hidden = true;
    var status = el("p", "muted judge-status");
    status.setAttribute("role", "status");
    var hitLinks = {};  // document id: the locator of its best hit, where pick mode starts
    [label, input, find, choices, save, pick, status].forEach(function (node) { form.appendChild(node); });
    choices.addEventListener("change", function () {
      var chosen = choices.querySelector("input:checked");
      var href = chosen && pickLink(options.url, chosen.value, kind, hitLinks[chosen.value]);
      pick.hidden = !href;
      if (href) pick.href = href;
    });

    function search() {
      var q = input.value.trim();
      if (!q) return;
      status.textContent = gettext("Searching…");
      json("GET", "/api/search?k=10&q=" + encodeURIComponent(q)).then(function (data) {
        choices.querySelectorAll(".judge-choice").forEach(function (node) { node.remove(); });
        pick.hidden = true;
        var seen = {};
        (data.hits || []).forEach(function (h) {
          if (seen[h.document_id]) return;
          seen[h.document_id] = true;
          hitLinks[h.document_id] = h.link;
          var row = el("div", "judge-choice");
          var radio = el("input");
          radio.type = "radio";
          radio.name = id + "-choice";
          radio.value = String(h.document_id);
          radio.id = id + "-" + h.document_id;
          var text = el("label", "", h.document_title);
          text.htmlFor = radio.id;
          row.appendChild(radio);
          row.appendChild(text);
          choices.appendChild(row);
        });
        var n = Object.keys(seen).length;
        status.textContent = n ? fmt(ngettext("%(count)s document found: choose the one that answers it.",
                                              "%(count)s documents found: choose the one that answers it.", n), { count: n })
                               : gettext("No document found; try other words.");
      }).catch(function (error) { status.textContent = fmt(gettext("The search failed: %(reason)s"), { reason: error.message }); });
    }
    find.addEventListener("click", search);
    input.addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); search(); }
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var chosen = choices.querySelector("input:checked");
      var body = { kind: kind };
      if (chosen) body.document = Number(chosen.value);
      save.disabled = true;
      json("POST", options.url, body).then(options.onSaved, function (error) {
        save.disabled = false;
        status.textContent = fmt(gettext("Not saved: %(reason)s"), { reason: error.message });
      });
    });
    wrap.appendChild(form);
    input.focus();
    search();
  }

  // The time zone the page's templates write dates in (<meta name="kb-time-zone">, templates/base.html), or undefined
  // (the browser's own) where there is none or this browser does not know it.
  function timeZone() {
    var meta = document.querySelector('meta[name="kb-time-zone"]');
    var zone = meta && meta.content ? meta.content : undefined;
    try { new Intl.DateTimeFormat("en", { timeZone: zone }); } catch (e) { zone = undefined; }
    return zone;
  }

  // A date as the page's templates write it (Django's DATE_FORMAT, or DATETIME_FORMAT with options.time; kb/formats),
  // in the page's language (<html lang>) and time zone. One format per language.
  function formatDate(value, options) {
    var style = { dateStyle: "medium", timeZone: timeZone() };
    if (options && options.time) style.timeStyle = "short";
    return new Intl.DateTimeFormat(document.documentElement.lang || undefined, style).format(new Date(value));
  }

  window.KB = { el: el, csrf: csrf, safeLink: safeLink, json: json, judge: judge, documentPicker: documentPicker,
                formatDate: formatDate, timeZone: timeZone };
})();
