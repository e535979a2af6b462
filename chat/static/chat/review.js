/* The review queue: the answers of one queue (unreviewed, rated down, refused, flagged, all), narrowed by folder and
 * search, each beside the passages it cites; one-key verdicts that move to the next answer; the counts from
 * GET /api/review/counts. Answers the reviewer may not read never reach this page (the server counts them).
 * All answer and document text goes in through textContent / createElement. */
(function () {
  "use strict";
  var list = document.getElementById("review-list");
  if (!list) return;
  var queue = list.getAttribute("data-filter") || "unreviewed";
  var folder = list.getAttribute("data-folder") || "";
  var search = list.getAttribute("data-q") || "";
  var curateUrl = list.getAttribute("data-curate") || "";  // the curated answers desk, for holders of chat.curate_answer
  var gettext = window.gettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }
  var KINDS = [["wrong_source", gettext("Wrong source")], ["unsupported", gettext("Unsupported claim")], ["outdated", gettext("Outdated")]];
  var KIND_LABEL = { right_source: gettext("Right source") };
  KINDS.forEach(function (k) { KIND_LABEL[k[0]] = k[1]; });
  var VERDICT_KEYS = { "1": "helpful", "2": "wrong", "3": "should_refuse", "4": "should_answer" };

  var KB = window.KB, el = KB.el, safeLink = KB.safeLink;
  var announcer = document.getElementById("review-announce");
  function announce(text) { if (announcer) announcer.textContent = text; }

  function when(iso) { return KB.formatDate(iso, { time: true }); }  // the date format of every page

  /* Reads name this page to the server, for the access log of answers shown through a review grant; a failed read
   * says what to do in the words the other pages use (KB.json), never a status code. */
  function read(url) { return KB.json("GET", url, undefined, { "X-Review-Surface": "page" }); }

  function narrowed(params) {
    var query = params.slice();
    if (folder) query.push("folder=" + encodeURIComponent(folder));
    if (search) query.push("q=" + encodeURIComponent(search));
    return query.join("&");
  }

  /* ---------------------------------------------------------------- counts */

  function refreshCounts() {
    read("/api/review/counts?" + narrowed(["queue=" + queue])).then(function (counts) {
      Object.keys(counts.queues).forEach(function (name) {
        var span = document.querySelector('.review-count[data-count="' + name + '"]');
        if (span) span.textContent = String(counts.queues[name]);
      });
      var select = document.getElementById("review-folder");
      if (select) {
        counts.folders.forEach(function (f) {
          var option = select.querySelector('option[value="' + f.id + '"]');
          if (option) option.textContent = f.name + " (" + f.count + ")";
        });
      }
    }).catch(function () { /* the numbers stay as they were; the next verdict tries again */ });
  }

  /* ---------------------------------------------------------------- flags */

  function flagItem(flag) {
    var li = el("li", "flag");
    li.appendChild(el("span", "flag-kind", KIND_LABEL[flag.kind] || flag.kind));
    var values = { citation: flag.citation, reviewer: flag.reviewer || gettext("a former reviewer"), when: when(flag.created_at) };
    li.appendChild(document.createTextNode(" " + (flag.citation
      ? fmt(gettext("on [%(citation)s] by %(reviewer)s, %(when)s"), values)
      : fmt(gettext("on the answer by %(reviewer)s, %(when)s"), values))));
    if (flag.note) li.appendChild(el("span", "flag-note", flag.note));
    return li;
  }

  /* A citation's flag form, closed behind one "Flag" button (f opens the first). */
  function flagForm(answer, citation, flagsList, item) {
    var id = "flag-" + answer.id + "-" + citation.number;
    var wrap = el("div", "flag-wrap");
    var toggle = el("button", "btn btn-small btn-ghost flag-toggle", fmt(gettext("Flag [%(number)s]"), { number: citation.number }));
    toggle.type = "button";
    toggle.setAttribute("aria-expanded", "false");
    toggle.setAttribute("aria-controls", id);
    var form = el("form", "flag-form");
    form.id = id;
    form.hidden = true;
    form.noValidate = true;
    var kindLabel = el("label", "", fmt(gettext("Flag [%(number)s] as"), { number: citation.number }));
    kindLabel.htmlFor = id + "-kind";
    var select = el("select");
    select.id = id + "-kind";
    select.name = "kind";
    KINDS.forEach(function (k) {
      var option = el("option", "", k[1]);
      option.value = k[0];
      select.appendChild(option);
    });
    var noteLabel = el("label", "", fmt(gettext("Note for [%(number)s]"), { number: citation.number }));
    noteLabel.htmlFor = id + "-note";
    var note = el("textarea");
    note.id = id + "-note";
    note.name = "note";
    note.maxLength = 4000;
    note.placeholder = gettext("What is wrong, and what the right source would be");
    var button = el("button", "btn btn-small", gettext("Flag citation"));
    button.type = "submit";
    var result = el("p", "");
    result.setAttribute("role", "status");
    [kindLabel, select, noteLabel, note, button, result].forEach(function (node) { form.appendChild(node); });
    function open(show) {
      form.hidden = !show;
      toggle.setAttribute("aria-expanded", show ? "true" : "false");
      if (show) select.focus();
    }
    toggle.addEventListener("click", function () { open(form.hidden); });
    form.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { event.stopPropagation(); open(false); focusItem(item); }
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      button.disabled = true;
      result.className = "";
      result.textContent = gettext("Saving…");
      KB.json("POST", "/api/review/answers/" + answer.id + "/feedback",
              { kind: select.value, citation: citation.number, note: note.value }).then(function (flag) {
        result.className = "flag-done";
        result.textContent = gettext("Flagged. It is listed under Flagged.");
        note.value = "";
        flagsList.appendChild(flagItem(flag));
        var status = item.querySelector(".review-status");
        if (status) { status.textContent = gettext("Flagged"); status.classList.add("flagged"); }
        refreshCounts();
      }).catch(function (error) {
        result.className = "flag-err";
        result.textContent = error.message;
      }).then(function () { button.disabled = false; });
    });
    wrap.appendChild(toggle);
    wrap.appendChild(form);
    return wrap;
  }

  var CLAIM_LABEL = { confirmed: gettext("confirmed"), dismissed: gettext("dismissed") };
  var STATUS_LABEL = { pending: gettext("pending"), running: gettext("running"), done: gettext("done"),
                       refused: gettext("refused"), failed: gettext("failed") };

  /* "Right source": support confirms the citation (feedback kind right_source), which remembers the question for
   * the passage it quotes (chat.remembering). */
  function rightSource(answer, citation, flagsList) {
    var button = el("button", "btn btn-small btn-ghost right-source", fmt(gettext("Right source [%(number)s]"), { number: citation.number }));
    button.type = "button";
    button.setAttribute("aria-pressed", answer.feedback.some(function (f) {
      return f.citation === citation.number && f.kind === "right_source" && f.reviewer === me;
    }) ? "true" : "false");
    button.addEventListener("click", function () {
      button.disabled = true;
      KB.json("POST", "/api/review/answers/" + answer.id + "/feedback", { kind: "right_source", citation: citation.number, note: "" }).then(function (flag) {
        button.setAttribute("aria-pressed", "true");
        flagsList.appendChild(flagItem(flag));
        announce(fmt(gettext("Citation [%(number)s] confirmed as the right source."), { number: citation.number }));
      }).catch(function (error) { announce(error.message); }).then(function () { button.disabled = false; });
    });
    return button;
  }

  /* Sentences the citation check found unsupported by their quotes: a reviewer confirms or dismisses each. */
  function claimList(answer) {
    var ul = el("ul", "unsupported-claims");
    answer.unsupported.forEach(function (claim, index) {
      var li = el("li", "unsupported-claim");
      li.setAttribute("data-verdict", claim.verdict);
      li.appendChild(el("q", "", claim.sentence));
      var sources = claim.numbers.map(function (n) { return "[" + n + "]"; }).join(" ");
      li.appendChild(el("small", "unsupported-note", " " + (claim.missing.length
        ? fmt(gettext("not found in source %(sources)s (missing: %(missing)s)"), { sources: sources, missing: claim.missing.join(", ") })
        : fmt(gettext("not found in source %(sources)s"), { sources: sources }))));
      var verdict = el("span", "claim-verdict muted", claim.verdict === "open" ? "" : " " + (CLAIM_LABEL[claim.verdict] || claim.verdict));
      li.appendChild(verdict);
      [["confirmed", gettext("Confirm")], ["dismissed", gettext("Dismiss")]].forEach(function (choice) {
        var button = el("button", "claim-" + choice[0], choice[1]);
        button.type = "button";
        button.addEventListener("click", function () {
          KB.json("POST", "/api/review/answers/" + answer.id + "/unsupported/" + index, { verdict: choice[0] }).then(function () {
            li.setAttribute("data-verdict", choice[0]);
            verdict.textContent = " " + CLAIM_LABEL[choice[0]];
          }).catch(function (error) { verdict.textContent = " " + error.message; });
        });
        li.appendChild(button);
      });
      ul.appendChild(li);
    });
    return ul;
  }

  /* ---------------------------------------------------------------- one answer */

  function answerItem(answer) {
    var item = el("article", "review-item");
    item.setAttribute("data-message", String(answer.id));
    item.setAttribute("data-status", answer.status);
    item.tabIndex = -1;
    item._answer = answer;
    var head = el("header", "review-head");
    var title = el("h2", "review-question", answer.question || gettext("(no question)"));
    title.id = "review-q-" + answer.id;
    item.setAttribute("aria-labelledby", title.id);
    head.appendChild(title);
    var meta = el("p", "review-meta muted");
    var status = el("span", "review-status" + (answer.feedback.length ? " flagged" : ""),
      answer.feedback.length ? gettext("Flagged") : STATUS_LABEL[answer.status] || answer.status);
    meta.appendChild(status);
    meta.appendChild(document.createTextNode(" " + fmt(gettext("asked by %(owner)s"), { owner: answer.owner }) + " · " +
      when(answer.created_at) + (answer.backend ? " · " + answer.backend : "")));
    head.appendChild(meta);
    if (answer.follows) {
      head.appendChild(el("p", "review-follows", fmt(gettext("Follow-up to: “%(question)s”"), { question: answer.follows })));
    }
    if (answer.review_grants && answer.review_grants.length) {
      head.appendChild(el("p", "review-granted muted", fmt(gettext("Shown through your review grant (%(grants)s); each read is written to the access log."),
        { grants: answer.review_grants.join(", ") })));
    }
    item.appendChild(head);
    item.appendChild(judgementList(answer));
    // The label the asker saw (chat.match): an answer that may not answer the question says so here too.
    if (answer.match === "closest") item.appendChild(el("p", "backend-badge match-closest", gettext("Closest passage — may not answer your question")));
    if (answer.match === "curated") {
      item.appendChild(el("p", "backend-badge backend-curated", answer.curated
        ? fmt(gettext("Curated answer by %(by)s"), { by: answer.curated.by }) : gettext("Curated answer")));
    }
    item.appendChild(el("p", "review-answer", answer.text || answer.refusal_reason || answer.error || ""));
    if (curateUrl && !answer.withheld && (answer.status === "done" || answer.status === "refused")) {
      // Support writes the answer once: the form opens with this question and this answer's citations.
      var write = el("a", "btn btn-small review-curate", gettext("Write an answer for this"));
      write.href = curateUrl + "?message=" + encodeURIComponent(String(answer.id));
      item.appendChild(write);
    }
    var trimmed = answer.text_truncated || answer.citations.some(function (c) { return c.quote_truncated; });
    if (trimmed) item.appendChild(wholeButton(answer, item));

    if (answer.unsupported && answer.unsupported.length) item.appendChild(claimList(answer));
    if (!answer.withheld && (answer.status === "done" || answer.status === "refused")) {
      item.appendChild(verdictRow(answer, mine(answer)));  // the server refuses verdicts on a withheld answer
    }
    item.appendChild(conversationPanel(answer, item));

    var answerFlags = answer.feedback.filter(function (f) { return !f.citation; });
    if (answerFlags.length) {
      var ul = el("ul", "flags");
      answerFlags.forEach(function (f) { ul.appendChild(flagItem(f)); });
      item.appendChild(ul);
    }

    var cites = el("div", "review-cites");
    answer.citations.forEach(function (citation) {
      var row = el("section", "review-cite");
      row.setAttribute("data-citation", String(citation.number));
      var left = el("div", "review-passage");
      var h = el("h3", "review-cite-head", "[" + citation.number + "] ");
      var granted = answer.review_grants && answer.review_grants.length;  // a grant does not open the viewer
      var href = granted ? "" : safeLink(citation.link);
      var link = el(href ? "a" : "span", "review-cite-link", citation.document_title);
      if (href) link.href = href;
      h.appendChild(link);
      left.appendChild(h);
      if (citation.label) left.appendChild(el("span", "review-cite-crumb", citation.label + (citation.page ? " · " + fmt(gettext("page %(page)s"), { page: citation.page }) : "")));
      var quote = el("blockquote", "review-quote", citation.quote);
      quote.setAttribute("data-citation", String(citation.number));
      left.appendChild(quote);
      var flags = el("ul", "flags");
      answer.feedback.filter(function (f) { return f.citation === citation.number; }).forEach(function (f) {
        flags.appendChild(flagItem(f));
      });
      left.appendChild(flags);
      row.appendChild(left);
      if (!answer.withheld) {  // the server refuses flags there
        row.appendChild(rightSource(answer, citation, flags));
        row.appendChild(flagForm(answer, citation, flags, item));
      }
      cites.appendChild(row);
    });
    if (answer.restricted_citations && answer.restricted_citations.length) {
      cites.appendChild(el("p", "muted", fmt(gettext("Citations %(numbers)s point to documents you cannot read, so they are not shown here."),
        { numbers: answer.restricted_citations.map(function (n) { return "[" + n + "]"; }).join(" ") })));
    } else if (!answer.citations.length) {
      cites.appendChild(el("p", "muted", gettext("This answer cites no sources.")));
    }
    item.appendChild(cites);
    item.addEventListener("focusin", function () { mark(item); });
    return item;
  }

  /* Everyone's verdicts on the answer (the asker's, with their reason and comment, and reviewers'), a named
   * document only where the reviewer may read it. */
  var VERDICT_LABEL = { helpful: gettext("Helpful"), wrong: gettext("Wrong"), should_refuse: gettext("Should have refused"),
                        should_answer: gettext("Should have answered") };
  var ROLE_LABEL = { asker: gettext("asker"), reviewer: gettext("reviewer") };
  // The asker's reason chips, in the words the Ask page offers them (chat.models.Judgement.Reason).
  var REASON_LABEL = { off_topic: gettext("Doesn't answer my question"), wrong_or_outdated: gettext("Wrong or outdated"),
                       should_refuse: gettext("Should have said it doesn't know"),
                       should_answer: gettext("The documents do answer this") };

  function judgementList(answer) {
    var ul = el("ul", "review-judgements");
    ul.setAttribute("aria-label", gettext("Verdicts"));
    answer.judgements.forEach(function (j) {
      var li = el("li", "review-judgement");
      li.setAttribute("data-kind", j.kind);
      li.setAttribute("data-role", j.role);
      var label;
      if (j.role === "asker") label = j.kind === "helpful" ? gettext("Rated helpful") : gettext("Rated down");
      else label = answer.status === "refused" && j.kind === "helpful" ? gettext("Right not to answer") : VERDICT_LABEL[j.kind] || j.kind;
      li.appendChild(el("span", "flag-kind", label));
      li.appendChild(document.createTextNode(" " + fmt(gettext("by %(judge)s (%(role)s), %(when)s"),
        { judge: j.judge || gettext("a former user"), role: ROLE_LABEL[j.role] || j.role, when: when(j.updated_at) })));
      if (j.role === "asker" && j.kind !== "helpful") {
        li.appendChild(el("span", "review-reason", j.reason ? REASON_LABEL[j.reason] || j.reason
          : fmt(gettext("Judged: %(kind)s"), { kind: VERDICT_LABEL[j.kind] || j.kind })));
      }
      if (j.document) {
        li.appendChild(document.createTextNode(" · " + gettext("answerable from") + " "));
        var href = safeLink(j.document.link);
        var link = el(href ? "a" : "span", "", j.document.title);
        if (href) link.href = href;
        li.appendChild(link);
      }
      if (j.note) li.appendChild(el("q", "flag-note", j.note));
      ul.appendChild(li);
    });
    return ul;
  }

  var me = list.getAttribute("data-user");

  function mine(answer) {
    return answer.judgements.filter(function (j) { return j.judge === me && j.role === "reviewer"; })[0] || null;
  }

  var lastJudged = null;  // the item whose verdict `u` takes back

  /* The reviewer's own verdict (KB.judge): on a refusal, "should have answered" names the document. A verdict
   * moves to the next answer; in the unreviewed queue the judged one folds away (it has left the queue). */
  function verdictRow(answer, judgement) {
    var row = el("div", "review-judge");
    var node = KB.judge({
      url: "/api/review/answers/" + answer.id + "/judgement", key: "review-" + answer.id,
      refused: answer.status === "refused", question: answer.question, judgement: judgement,
      showNamed: false,  // the list of verdicts above names it
      onSaved: function (saved) { judged(row.parentNode, answer, saved); },
      onError: function (message) { status.textContent = fmt(gettext("Your verdict was not saved: %(reason)s"), { reason: message }); }
    });
    var status = el("p", "flag-err");
    status.setAttribute("role", "status");
    row.appendChild(node);
    row.appendChild(status);
    return row;
  }

  function judged(item, answer, saved) {
    answer.judgements = answer.judgements.filter(function (j) { return !(j.judge === me && j.role === "reviewer"); });
    if (saved) answer.judgements.push(saved);
    item.replaceChild(judgementList(answer), item.querySelector(".review-judgements"));
    item.replaceChild(verdictRow(answer, saved), item.querySelector(".review-judge"));
    var stub = item.querySelector(".review-judged");
    if (stub) stub.remove();
    refreshCounts();
    if (!saved) {
      item.classList.remove("is-judged");
      announce(gettext("Verdict taken back."));
      focusItem(item);
      return;
    }
    lastJudged = item;
    var label = answer.status === "refused" && saved.kind === "helpful" ? gettext("Right not to answer") : VERDICT_LABEL[saved.kind];
    if (queue === "unreviewed") {
      item.classList.add("is-judged");
      var line = el("p", "review-judged", fmt(gettext("Judged “%(verdict)s”: it has left the unreviewed queue."), { verdict: label }) + " ");
      var undo = el("button", "btn btn-small btn-ghost", gettext("Undo"));
      undo.type = "button";
      undo.addEventListener("click", function () { takeBack(item); });
      line.appendChild(undo);
      item.appendChild(line);
    }
    announce(fmt(gettext("Saved: %(verdict)s."), { verdict: label }));
    move(item, 1);
  }

  function takeBack(item) {
    if (!item || !item.parentNode) return;
    KB.json("DELETE", "/api/review/answers/" + item._answer.id + "/judgement").then(function () {
      judged(item, item._answer, null);
    }).catch(function (error) { announce(error.message); });
  }

  /* The conversation the answer belongs to (GET /api/review/conversations/{id}), beside it on demand: a follow-up
   * reads wrong without what came before. */
  function conversationPanel(answer, item) {
    var wrap = el("div", "review-conversation-wrap");
    var button = el("button", "btn btn-small btn-ghost review-conversation-toggle", gettext("Show the conversation"));
    button.type = "button";
    button.setAttribute("aria-expanded", "false");
    var panel = el("ol", "review-conversation");
    panel.hidden = true;
    panel.setAttribute("aria-label", gettext("The conversation"));
    button.addEventListener("click", function () { toggleConversation(answer, button, panel); });
    wrap.appendChild(button);
    wrap.appendChild(panel);
    item._conversation = function () { toggleConversation(answer, button, panel); };
    return wrap;
  }

  function toggleConversation(answer, button, panel) {
    var open = panel.hidden;
    panel.hidden = !open;
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.textContent = open ? gettext("Hide the conversation") : gettext("Show the conversation");
    if (!open || panel.getAttribute("data-loaded")) return;
    panel.textContent = "";
    panel.appendChild(el("li", "muted", gettext("Loading the conversation…")));
    read("/api/review/conversations/" + answer.conversation + "?limit=20").then(function (conversation) {
      panel.textContent = "";
      panel.setAttribute("data-loaded", "true");
      conversation.messages.forEach(function (m) {
        var li = el("li", "review-turn review-turn-" + m.role + (m.id === answer.id ? " is-current" : ""));
        li.appendChild(el("span", "review-turn-who", m.role === "user" ? gettext("Question") : gettext("Answer")));
        li.appendChild(el("span", "review-turn-text", m.text || m.refusal_reason || m.error || ""));
        panel.appendChild(li);
      });
      if (conversation.before) panel.insertBefore(el("li", "muted", gettext("Earlier messages are not shown.")), panel.firstChild);
    }).catch(function (error) {
      panel.textContent = "";
      panel.appendChild(el("li", "flag-err", error.message));
    });
  }

  /* The list carries the start of long answers and quotes; the whole text comes on demand. */
  function wholeButton(answer, item) {
    var button = el("button", "btn btn-small review-whole", gettext("Show the whole answer and passages"));
    button.type = "button";
    var status = el("span", "flag-err");
    status.setAttribute("role", "status");
    button.addEventListener("click", function () {
      button.disabled = true;
      read("/api/review/answers/" + answer.id).then(function (full) {
        item.querySelector(".review-answer").textContent = full.text || full.refusal_reason || full.error || "";
        full.citations.forEach(function (c) {
          var quote = item.querySelector('.review-quote[data-citation="' + c.number + '"]');
          if (quote) quote.textContent = c.quote;
        });
        button.remove();
        status.remove();
      }).catch(function (error) {
        button.disabled = false;
        status.textContent = " " + error.message;
        button.after(status);
      });
    });
    return button;
  }

  /* ---------------------------------------------------------------- focus and keys */

  var current = null;

  function open() { return Array.prototype.slice.call(list.querySelectorAll(".review-item:not(.is-judged)")); }

  function mark(item) {
    if (current === item) return;
    if (current) current.classList.remove("is-focused");
    current = item;
    if (item) item.classList.add("is-focused");
  }

  function focusItem(item, stay) {
    mark(item);
    if (!item) return;
    item.focus({ preventScroll: true });
    if (!stay) item.scrollIntoView({ block: "nearest" });  // on load the page stays at its top, filters in view
  }

  /* The next (step 1) or previous (-1) answer still in the queue after `from`; past the last, the next page. */
  function move(from, step) {
    var items = open();
    var all = Array.prototype.slice.call(list.querySelectorAll(".review-item"));
    var at = all.indexOf(from);
    var target = null;
    for (var i = at + step; i >= 0 && i < all.length; i += step) {
      if (items.indexOf(all[i]) >= 0) { target = all[i]; break; }
    }
    if (!target && step > 0 && !more.disabled && more.parentNode) { loadPage(lastId, true); return; }
    if (!target && step > 0 && !items.length) { finished(); return; }
    focusItem(target || (items.indexOf(from) >= 0 ? from : items[items.length - 1] || null));
  }

  function finished() {
    mark(null);
    var box = list.querySelector(".review-done");
    if (!box) {
      box = empty(gettext("Nothing left to review"), queue === "unreviewed"
        ? gettext("Every answer in this queue has a verdict. New answers appear here as people ask questions.")
        : gettext("You have reached the end of this list."));
      box.classList.add("review-done");
      box.tabIndex = -1;
      list.appendChild(box);
    }
    box.focus();
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  var help = document.getElementById("review-help");

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    if (event.key === "Escape") {
      if (help && !help.hidden) { help.hidden = true; return; }
      if (current && current.contains(event.target) && event.target !== current) { focusItem(current); }
      return;
    }
    if (typing(event.target)) return;
    var item = current && current.parentNode ? current : null;
    var key = event.key;
    if (key === "?") { if (help) help.hidden = !help.hidden; event.preventDefault(); return; }
    if (key === "/") { var box = document.getElementById("review-q"); if (box) { event.preventDefault(); box.focus(); } return; }
    if (key === "j") { event.preventDefault(); if (item) move(item, 1); else focusItem(open()[0] || null); return; }
    if (key === "k") { event.preventDefault(); if (item) move(item, -1); else focusItem(open()[0] || null); return; }
    if (key === "u") { event.preventDefault(); takeBack(lastJudged); return; }
    if (!item) return;
    if (VERDICT_KEYS[key]) {
      event.preventDefault();
      var button = item.querySelector('.review-judge button.rate[data-kind="' + VERDICT_KEYS[key] + '"]');
      if (!button) {
        announce(item._answer.status === "refused"
          ? gettext("On a refusal: 1 right not to answer, 4 should have answered.")
          : gettext("This answer cannot be judged yet."));
        return;
      }
      if (button.getAttribute("aria-pressed") === "true") { move(item, 1); return; }  // given already: next
      button.click();
      return;
    }
    if (key === "f") {
      var toggle = item.querySelector(".flag-toggle");
      if (toggle) { event.preventDefault(); if (toggle.getAttribute("aria-expanded") !== "true") toggle.click(); else item.querySelector(".flag-form select").focus(); }
      return;
    }
    if (key === "c" && item._conversation) { event.preventDefault(); item._conversation(); }
  });

  var folderSelect = document.getElementById("review-folder");
  if (folderSelect) folderSelect.addEventListener("change", function () { folderSelect.form.submit(); });

  /* ---------------------------------------------------------------- pages */

  function empty(title, text) {
    var box = el("div", "empty-state");
    box.appendChild(el("h2", "", title));
    box.appendChild(el("p", "muted", text));
    return box;
  }

  var EMPTY = {
    unreviewed: [gettext("Nothing left to review"), gettext("Every answer in this queue has a verdict. New answers appear here as people ask questions.")],
    closest: [gettext("No closest matches"), gettext("Answers labelled “Closest passage — may not answer your question” appear here: most wrong answers are among them.")],
    rated_down: [gettext("No answers rated down"), gettext("Answers the askers rated down appear here with their reason and comment.")],
    refused: [gettext("No refusals"), gettext("Questions the knowledge base declined to answer appear here.")],
    flagged: [gettext("No flagged answers"), gettext("Citations you flag as wrong, unsupported or outdated are listed here with their notes.")],
    all: [gettext("Nothing to review yet"), gettext("Answers appear here as people ask questions.")]
  };

  var PAGE = 20;
  var lastId = null;
  var more = el("button", "btn review-more", gettext("Load older answers"));
  more.type = "button";
  more.disabled = true;
  more.addEventListener("click", function () { loadPage(lastId, false); });

  function loadPage(before, thenFocus) {
    more.disabled = true;
    var url = "/api/review/answers?" + narrowed(["limit=" + PAGE, "queue=" + queue]) + (before ? "&before=" + before : "");
    read(url).then(function (answers) {
      if (!before) {
        list.textContent = "";
        list.setAttribute("data-loaded", "true");
      }
      if (!answers.length && !before) {
        var words = search || folder ? [gettext("No answers match"), gettext("Try other words, another folder or another queue.")] : EMPTY[queue];
        list.appendChild(empty(words[0], words[1]));
        return;
      }
      var first = null;
      answers.forEach(function (answer) {
        var item = answerItem(answer);
        first = first || item;
        list.insertBefore(item, more.parentNode ? more : null);
      });
      if (answers.length) lastId = answers[answers.length - 1].id;
      if (answers.length === PAGE) {
        more.disabled = false;
        list.appendChild(more);
      } else if (more.parentNode) {
        more.remove();
      }
      if (!before) focusItem(first, true);
      else if (thenFocus) { if (first) focusItem(first); else finished(); }
    }).catch(function (error) {
      if (!before) list.textContent = "";
      var alert = el("div", "alert alert-error", fmt(gettext("The answers could not be loaded. %(reason)s"), { reason: error.message }));
      alert.setAttribute("role", "alert");
      list.appendChild(alert);
      more.disabled = false;
    });
  }

  loadPage(null, false);
})();
