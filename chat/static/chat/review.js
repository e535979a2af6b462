/* Review desk: recent answers beside the passages they cite, with a flag form per citation.
 * All answer and document text goes in through textContent / createElement. */
(function () {
  "use strict";
  var list = document.getElementById("review-list");
  if (!list) return;
  var flaggedOnly = list.getAttribute("data-filter") === "flagged";
  var gettext = window.gettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }
  var lang = document.documentElement.lang || undefined;
  var KINDS = [["wrong_source", gettext("Wrong source")], ["unsupported", gettext("Unsupported claim")], ["outdated", gettext("Outdated")]];
  var KIND_LABEL = {};
  KINDS.forEach(function (k) { KIND_LABEL[k[0]] = k[1]; });

  var el = window.KB.el, csrf = window.KB.csrf, safeLink = window.KB.safeLink;

  function when(iso) {
    return new Date(iso).toLocaleString(lang, { dateStyle: "medium", timeStyle: "short" });
  }

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

  function flagForm(answer, citation, flagsList, item) {
    var id = "flag-" + answer.id + "-" + citation.number;
    var form = el("form", "flag-form");
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
    form.appendChild(kindLabel);
    form.appendChild(select);
    form.appendChild(noteLabel);
    form.appendChild(note);
    form.appendChild(button);
    form.appendChild(result);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      button.disabled = true;
      result.className = "";
      result.textContent = gettext("Saving…");
      fetch("/api/review/answers/" + answer.id + "/feedback", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf() },
        body: JSON.stringify({ kind: select.value, citation: citation.number, note: note.value }),
      }).then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (data) {
          if (!response.ok) throw new Error(typeof data.detail === "string" ? data.detail : "HTTP " + response.status);
          return data;
        });
      }).then(function (flag) {
        result.className = "flag-done";
        result.textContent = gettext("Flagged. It is listed under Flagged.");
        note.value = "";
        flagsList.appendChild(flagItem(flag));
        var status = item.querySelector(".review-status");
        if (status) { status.textContent = gettext("Flagged"); status.classList.add("flagged"); }
      }).catch(function (error) {
        result.className = "flag-err";
        result.textContent = fmt(gettext("Could not save the flag: %(reason)s"), { reason: error.message });
      }).then(function () { button.disabled = false; });
    });
    return form;
  }

  var CLAIM_LABEL = { confirmed: gettext("confirmed"), dismissed: gettext("dismissed") };
  var STATUS_LABEL = { pending: gettext("pending"), running: gettext("running"), done: gettext("done"),
                       refused: gettext("refused"), failed: gettext("failed") };

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
          fetch("/api/review/answers/" + answer.id + "/unsupported/" + index, {
            method: "POST", credentials: "same-origin",
            headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf() },
            body: JSON.stringify({ verdict: choice[0] })
          }).then(function (response) {
            if (!response.ok) throw new Error(fmt(gettext("Could not save (%(status)s)"), { status: response.status }));
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

  function answerItem(answer) {
    var item = el("article", "review-item");
    item.setAttribute("data-message", String(answer.id));
    var head = el("header", "review-head");
    var title = el("h2", "review-question", answer.question || gettext("(no question)"));
    head.appendChild(title);
    var meta = el("p", "review-meta muted");
    var status = el("span", "review-status" + (answer.feedback.length ? " flagged" : ""),
      answer.feedback.length ? gettext("Flagged") : STATUS_LABEL[answer.status] || answer.status);
    meta.appendChild(status);
    meta.appendChild(document.createTextNode(" " + fmt(gettext("asked by %(owner)s"), { owner: answer.owner }) + " · " +
      when(answer.created_at) + (answer.backend ? " · " + answer.backend : "")));
    head.appendChild(meta);
    if (answer.review_grants && answer.review_grants.length) {
      head.appendChild(el("p", "review-granted muted", fmt(gettext("Shown through your review grant (%(grants)s); each read is written to the access log."),
        { grants: answer.review_grants.join(", ") })));
    }
    item.appendChild(head);
    item.appendChild(el("p", "review-answer", answer.text || answer.refusal_reason || answer.error || ""));
    var trimmed = answer.text_truncated || answer.citations.some(function (c) { return c.quote_truncated; });
    if (trimmed) item.appendChild(wholeButton(answer, item));

    if (answer.unsupported && answer.unsupported.length) item.appendChild(claimList(answer));
    item.appendChild(judgementList(answer));
    if (!answer.withheld && (answer.status === "done" || answer.status === "refused")) {
      item.appendChild(verdictRow(answer, mine(answer)));  // the server refuses verdicts on a withheld answer
    }

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
      if (!answer.withheld) row.appendChild(flagForm(answer, citation, flags, item));  // the server refuses flags there
      cites.appendChild(row);
    });
    if (answer.restricted_citations && answer.restricted_citations.length) {
      cites.appendChild(el("p", "muted", fmt(gettext("Citations %(numbers)s point to documents you cannot read, so they are not shown here."),
        { numbers: answer.restricted_citations.map(function (n) { return "[" + n + "]"; }).join(" ") })));
    } else if (!answer.citations.length) {
      cites.appendChild(el("p", "muted", gettext("This answer cites no sources.")));
    }
    item.appendChild(cites);
    return item;
  }

  /* Everyone's verdicts on the answer (the asker's and reviewers'), a named document only where the reviewer
   * may read it. */
  var VERDICT_LABEL = { helpful: gettext("Helpful"), wrong: gettext("Wrong"), should_refuse: gettext("Should have refused"),
                        should_answer: gettext("Should have answered") };
  var ROLE_LABEL = { asker: gettext("asker"), reviewer: gettext("reviewer") };

  function judgementList(answer) {
    var ul = el("ul", "review-judgements");
    ul.setAttribute("aria-label", gettext("Verdicts"));
    answer.judgements.forEach(function (j) {
      var li = el("li", "review-judgement");
      li.setAttribute("data-kind", j.kind);
      var label = answer.status === "refused" && j.kind === "helpful" ? gettext("Right not to answer") : VERDICT_LABEL[j.kind] || j.kind;
      li.appendChild(el("span", "flag-kind", label));
      li.appendChild(document.createTextNode(" " + fmt(gettext("by %(judge)s (%(role)s), %(when)s"),
        { judge: j.judge || gettext("a former user"), role: ROLE_LABEL[j.role] || j.role, when: when(j.updated_at) })));
      if (j.document) {
        li.appendChild(document.createTextNode(" · " + gettext("answerable from") + " "));
        var href = safeLink(j.document.link);
        var link = el(href ? "a" : "span", "", j.document.title);
        if (href) link.href = href;
        li.appendChild(link);
      }
      if (j.note) li.appendChild(el("span", "flag-note", j.note));
      ul.appendChild(li);
    });
    return ul;
  }

  var me = list.getAttribute("data-user");

  function mine(answer) {
    return answer.judgements.filter(function (j) { return j.judge === me && j.role === "reviewer"; })[0] || null;
  }

  /* The reviewer's own verdict (KB.judge): on a refusal, "should have answered" names the document. */
  function verdictRow(answer, judgement) {
    var row = el("div", "review-judge");
    var node = window.KB.judge({
      url: "/api/review/answers/" + answer.id + "/judgement", key: "review-" + answer.id,
      refused: answer.status === "refused", question: answer.question, judgement: judgement,
      showNamed: false,  // the list of verdicts above names it
      onSaved: function (saved) {
        answer.judgements = answer.judgements.filter(function (j) { return !(j.judge === me && j.role === "reviewer"); });
        if (saved) answer.judgements.push(saved);
        var item = row.parentNode;
        item.replaceChild(judgementList(answer), item.querySelector(".review-judgements"));
        item.replaceChild(verdictRow(answer, saved), row);
      },
      onError: function (message) { status.textContent = fmt(gettext("Your verdict was not saved: %(reason)s"), { reason: message }); }
    });
    var status = el("p", "flag-err");
    status.setAttribute("role", "status");
    row.appendChild(node);
    row.appendChild(status);
    return row;
  }

  /* The list carries the start of long answers and quotes; the whole text comes on demand. */
  function wholeButton(answer, item) {
    var button = el("button", "btn btn-small review-whole", gettext("Show the whole answer and passages"));
    button.type = "button";
    button.addEventListener("click", function () {
      button.disabled = true;
      fetch("/api/review/answers/" + answer.id, { credentials: "same-origin", headers: READ_HEADERS })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        }).then(function (full) {
          item.querySelector(".review-answer").textContent = full.text || full.refusal_reason || full.error || "";
          full.citations.forEach(function (c) {
            var quote = item.querySelector('.review-quote[data-citation="' + c.number + '"]');
            if (quote) quote.textContent = c.quote;
          });
          button.remove();
        }).catch(function (error) {
          button.disabled = false;
          button.textContent = fmt(gettext("Could not load it (%(reason)s); try again"), { reason: error.message });
        });
    });
    return button;
  }

  function empty(title, text) {
    var box = el("div", "empty-state");
    box.appendChild(el("h2", "", title));
    box.appendChild(el("p", "muted", text));
    return box;
  }

  /* Reads name this page to the server, for the access log of answers shown through a review grant. */
  var READ_HEADERS = { Accept: "application/json", "X-Review-Surface": "page" };

  var PAGE = 20;
  var more = el("button", "btn review-more", gettext("Load older answers"));
  more.type = "button";

  function loadPage(before) {
    more.disabled = true;
    var url = "/api/review/answers?limit=" + PAGE + (flaggedOnly ? "&flagged=true" : "") + (before ? "&before=" + before : "");
    fetch(url, { credentials: "same-origin", headers: READ_HEADERS }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    }).then(function (answers) {
      if (!before) {
        list.textContent = "";
        list.setAttribute("data-loaded", "true");
      }
      if (!answers.length && !before) {
        list.appendChild(flaggedOnly
          ? empty(gettext("No flagged answers"), gettext("Citations you flag as wrong, unsupported or outdated are listed here with their notes."))
          : empty(gettext("Nothing to review yet"), gettext("Answers appear here as people ask questions.")));
        return;
      }
      answers.forEach(function (answer) { list.insertBefore(answerItem(answer), more.parentNode ? more : null); });
      if (answers.length === PAGE) {
        more.onclick = function () { loadPage(answers[answers.length - 1].id); };
        more.disabled = false;
        list.appendChild(more);
      } else if (more.parentNode) {
        more.remove();
      }
    }).catch(function (error) {
      if (!before) list.textContent = "";
      var alert = el("div", "alert alert-error", fmt(gettext("The answers could not be loaded (%(reason)s). Reload the page to try again."), { reason: error.message }));
      alert.setAttribute("role", "alert");
      list.appendChild(alert);
    });
  }

  loadPage(null);
})();
