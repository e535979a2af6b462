/* The asker's feedback on one of their answers (the Ask page): thumbs up ("Helpful"), or thumbs down with a reason
 * chip and words of their own, sent as POST /api/messages/<id>/rating {rating, reason, comment}. The server stores
 * the verdict kind the reason stands for (chat.review.judgements.feedback_kind); the four kinds and the document picker
 * stay on the review desk (KB.judge). The chosen thumb is pressed (aria-pressed), the reason and the words are
 * said under it; pressing the chosen thumb again takes the feedback back, "Change" edits it. Text goes in through
 * textContent only. */
(function () {
  "use strict";
  var el = window.KB.el, json = window.KB.json, safeLink = window.KB.safeLink;
  var gettext = window.gettext;

  var COMMENT_MAX = 1000; // chat.review.judgements.COMMENT_MAX
  var REASON_LABEL = {
    off_topic: gettext("Doesn't answer my question"),
    wrong_or_outdated: gettext("Wrong or outdated"),
    should_refuse: gettext("Should have said it doesn't know"),
    should_answer: gettext("The documents do answer this")
  };
  // The chips each offers (chat.review.judgements.ANSWER_REASONS, REFUSAL_REASONS).
  var ANSWER_REASONS = ["off_topic", "wrong_or_outdated", "should_refuse"];
  var REFUSAL_REASONS = ["should_answer"];
  // A verdict given without a chip (the older thumbs, the API): the chip its kind reads as, if one does.
  var KIND_REASON = { should_refuse: "should_refuse", should_answer: "should_answer" };
  var SVG = "http://www.w3.org/2000/svg";

  function thumbIcon() {
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    var path = document.createElementNS(SVG, "path");
    path.setAttribute("d", "M7 10v11H4a1 1 0 0 1-1-1v-9a1 1 0 0 1 1-1zm0 0 4-8a3 3 0 0 1 3 3v4h5.4a2 2 0 0 1 2 2.3l-1.3 8A2 2 0 0 1 18.1 21H7");
    svg.appendChild(path);
    return svg;
  }

  // What the stored verdict says, as the widget shows it (null: none given).
  function given(judgement) {
    if (!judgement) return null;
    return { rating: judgement.kind === "helpful" ? 1 : -1, reason: judgement.reason || KIND_REASON[judgement.kind] || "",
             note: judgement.note || "", document: judgement.document || null };
  }

  /* options: message (the answer's id), refused, judgement (the asker's own, or null), question (what was asked),
   * onError(error). After "The documents do answer this", the asker may show where: a document, and the passage picked
   * in the viewer (KB.documentPicker, dom.js), which teaches retrieval for everyone who may read it.
   * Returns the element; it redraws itself as the feedback changes. */
  function feedback(options) {
    var wrap = el("div", "turn-feedback");
    var body = el("div", "feedback-body"); // redrawn as the feedback changes
    var status = el("p", "feedback-status visually-hidden"); // kept, so that what it says is announced
    status.setAttribute("role", "status");
    wrap.appendChild(body);
    wrap.appendChild(status);
    var state = given(options.judgement);
    var editing = null; // while the thumbs-down panel is open: {reason, note}
    var key = "feedback-" + options.message;
    var reasons = options.refused ? REFUSAL_REASONS : ANSWER_REASONS;
    var url = "/api/messages/" + options.message + "/rating";

    function send(sent, next, announce) {
      if (wrap.getAttribute("aria-busy") === "true") return; // one request at a time
      var pressed = sent.rating === 1 || (sent.rating === 0 && state && state.rating === 1) ? "up" : "down";
      wrap.setAttribute("aria-busy", "true");
      json("POST", url, sent).then(function () {
        state = next;
        editing = null;
        draw(["[data-thumb=" + pressed + "]"], announce);
      }, function (error) {
        wrap.setAttribute("aria-busy", "false");
        options.onError(error);
      });
    }

    function thumb(name, label, pressed) {
      var button = el("button", "thumb thumb-" + name);
      button.type = "button";
      button.setAttribute("data-thumb", name);
      button.setAttribute("aria-pressed", pressed ? "true" : "false");
      button.appendChild(thumbIcon());
      button.appendChild(el("span", "", label));
      return button;
    }

    function panel() {
      var box = el("div", "feedback-panel");
      box.id = key + "-panel";
      var title = el("p", "feedback-question", options.refused ? gettext("What should it have done?") : gettext("What went wrong?"));
      title.id = key + "-reasons";
      box.appendChild(title);
      var chips = el("div", "feedback-reasons");
      chips.setAttribute("role", "group");
      chips.setAttribute("aria-labelledby", title.id);
      reasons.forEach(function (reason) {
        var chip = el("button", "chip", REASON_LABEL[reason]);
        chip.type = "button";
        chip.setAttribute("data-reason", reason);
        chip.setAttribute("aria-pressed", editing.reason === reason ? "true" : "false");
        chip.addEventListener("click", function () {
          editing.reason = reason;
          editing.note = comment.value;
          draw(["[data-reason=" + reason + "]"]);
        });
        chips.appendChild(chip);
      });
      box.appendChild(chips);
      var label = el("label", "", gettext("Anything else? (optional)"));
      label.htmlFor = key + "-comment";
      var comment = el("textarea", "feedback-comment");
      comment.id = label.htmlFor;
      comment.rows = 2;
      comment.maxLength = COMMENT_MAX;
      comment.value = editing.note;
      comment.addEventListener("input", function () { editing.note = comment.value; });
      box.appendChild(label);
      box.appendChild(comment);
      var actions = el("div", "feedback-actions");
      var save = el("button", "btn btn-small btn-primary", gettext("Send feedback"));
      save.type = "button";
      save.setAttribute("data-action", "send");
      save.disabled = !editing.reason;
      save.addEventListener("click", function () {
        var note = comment.value.trim();
        send({ rating: -1, reason: editing.reason, comment: note },
             { rating: -1, reason: editing.reason, note: note, document: null }, gettext("Thank you: your feedback was saved."));
      });
      var cancel = el("button", "btn btn-small btn-ghost", gettext("Cancel"));
      cancel.type = "button";
      cancel.addEventListener("click", function () { editing = null; draw(["[data-thumb=down]"]); });
      actions.appendChild(save);
      actions.appendChild(cancel);
      if (!editing.reason) actions.appendChild(el("span", "muted feedback-hint", gettext("Choose a reason to send it.")));
      box.appendChild(actions);
      return box;
    }

    // What was said, under the thumbs: the reason chip and the words, with "Change".
    function said() {
      var line = el("p", "feedback-given");
      line.appendChild(el("span", "muted", gettext("Your feedback:") + " "));
      line.appendChild(el("strong", "feedback-reason", REASON_LABEL[state.reason] || gettext("Not helpful")));
      if (state.note) line.appendChild(el("q", "feedback-note", state.note));
      var change = el("button", "btn btn-small btn-ghost feedback-change", gettext("Change"));
      change.type = "button";
      change.addEventListener("click", function () {
        editing = { reason: state.reason, note: state.note };
        draw([".chip[aria-pressed=true]", ".chip"]);
      });
      line.appendChild(change);
      return line;
    }

    // Draws the widget as `state` and `editing` are; focus goes to the first of the `focus` selectors found.
    function draw(focus, announce) {
      body.textContent = "";
      wrap.setAttribute("aria-busy", "false");
      var group = el("div", "turn-rating");
      group.setAttribute("role", "group");
      group.setAttribute("aria-label", options.refused ? gettext("Judge this refusal") : gettext("Judge this answer"));
      group.appendChild(el("span", "muted", gettext("Was this helpful?")));
      var up = thumb("up", gettext("Helpful"), state && state.rating === 1);
      var down = thumb("down", gettext("Not helpful"), state && state.rating === -1);
      down.setAttribute("aria-expanded", editing ? "true" : "false");
      if (editing) down.setAttribute("aria-controls", key + "-panel");
      up.addEventListener("click", function () {
        if (state && state.rating === 1) send({ rating: 0 }, null, gettext("Your feedback was taken back."));
        else send({ rating: 1 }, { rating: 1, reason: "", note: "", document: null }, gettext("Thank you: your feedback was saved."));
      });
      down.addEventListener("click", function () {
        if (editing) { editing = null; draw(["[data-thumb=down]"]); return; }
        if (state && state.rating === -1) { send({ rating: 0 }, null, gettext("Your feedback was taken back.")); return; }
        editing = { reason: reasons.length === 1 ? reasons[0] : "", note: "" };
        draw([".chip"]);
      });
      group.appendChild(up);
      group.appendChild(down);
      body.appendChild(group);
      if (editing) body.appendChild(panel());
      else if (state && state.rating === -1) body.appendChild(said());
      if (state && state.reason === "should_answer" && !state.document && !editing) {
        var where = el("button", "btn btn-small btn-ghost feedback-where", gettext("Show where the documents answer it"));
        where.type = "button";
        where.addEventListener("click", function () {
          window.KB.documentPicker({
            url: "/api/messages/" + options.message + "/judgement", key: key, question: options.question || "",
            onSaved: function (judgement) {
              var form = wrap.querySelector(".judge-document");
              if (form) form.remove();
              state = given(judgement);
              draw([".feedback-change"], gettext("Thank you: your feedback was saved."));
            },
            onError: options.onError
          }, wrap, "should_answer");
        });
        body.appendChild(where);
      }
      if (state && state.document && !editing) {
        var line = el("p", "judge-named muted", gettext("Answerable from:") + " ");
        var href = safeLink(state.document.link);
        var link = el(href ? "a" : "span", "", state.document.title);
        if (href) link.href = href;
        line.appendChild(link);
        body.appendChild(line);
      }
      status.textContent = announce || "";
      for (var i = 0; focus && i < focus.length; i++) {
        var target = body.querySelector(focus[i]);
        if (target) { target.focus(); break; }
      }
    }

    draw();
    return wrap;
  }

  window.KB.feedback = feedback;
})();
