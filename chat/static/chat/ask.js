/* Ask page: POST /api/ask, then /ws/chat/<conversation>/ streams the answer.
 *
 * When something fails the reader is told what to do next (KB.json's error kinds): a session that ended keeps
 * the question (sessionStorage) and offers to sign in again, after which it is back in the box; a socket that
 * drops while an answer is written reconnects with backoff and says so.
 *
 * Every piece of model or document text goes into the page through textContent or
 * createElement: never innerHTML. The model's [n] markers become chips linking to the
 * server's locator for that citation, numbered 1..n per answer as its own sources list under it
 * is; anything else that looks like a link stays text.
 */
(function () {
  "use strict";
  var root = document.getElementById("ask");
  var form = document.getElementById("ask-form");
  var box = document.getElementById("question");
  var submit = document.getElementById("ask-submit");
  var answerEl = document.getElementById("answer");
  var historyEl = document.getElementById("history");
  var statusEl = document.getElementById("ask-status");
  var noticeEl = document.getElementById("ask-notice");
  var emptyView = answerEl && answerEl.querySelector(".answer-empty"); // shown again when nothing was asked
  if (!root || !form || !box) return;

  // What arrived, in order: the browser tests read this (e.g. several tokens before `done`).
  var trace = (window.__kbAsk = { events: [], tokensBeforeDone: 0 });

  var conversation = null;
  var socket = null;
  var socketFor = null;
  var turns = {}; // answer message id -> turn
  var turnList = [];
  var earlier = null; // while an earlier page is shown: {before: node it goes above, list: its turns}
  var replaying = false; // while stored messages are shown: their ends do not each reload the history
  var lastQuestion = "";
  var chipCount = 0; // keeps preview ids unique when a source is cited twice
  var DRAFT = "kb.ask.draft"; // sessionStorage: the question kept while the reader signs in again
  var RECONNECT_DELAYS = [1, 2, 4, 8, 16]; // seconds before each try to reconnect a dropped socket; then give up
  var reconnects = 0; // tries since the socket last delivered
  var dropped = false; // the socket dropped and is not delivering again yet: the notice says so
  var reconnectTimer = null;

  // ---------------------------------------------------------------- helpers

  var el = window.KB.el, safeLink = window.KB.safeLink;
  // The page's language (Django's JavaScriptCatalog, /jsi18n/, loaded before this file).
  var gettext = window.gettext, ngettext = window.ngettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }
  var lang = document.documentElement.lang || undefined;
  function pageOf(page) { return " · " + fmt(gettext("page %(page)s"), { page: page }); }

  var api = window.KB.json;

  function setState(state) { root.setAttribute("data-state", state); }

  function showStatus(kind, message) {
    if (!statusEl) return;
    statusEl.hidden = !message;
    statusEl.className = "alert " + (kind === "error" ? "alert-error" : "alert-info");
    statusEl.setAttribute("role", kind === "error" ? "alert" : "status");
    statusEl.textContent = message || "";
  }

  // The line above the question box (a live region): what stands between the reader and an answer, and the
  // next step (`action`, a link or a button). No message: nothing shown.
  function notice(kind, message, action) {
    noticeEl.textContent = "";
    noticeEl.className = "ask-notice" + (message ? " alert " + (kind === "error" ? "alert-error" : "alert-info") : "");
    if (!message) return;
    noticeEl.appendChild(el("span", "", message));
    if (action) {
      noticeEl.appendChild(document.createTextNode(" "));
      noticeEl.appendChild(action);
    }
  }

  // A question the reader must not lose: kept for this tab until the Ask page is open again.
  function keep(question) {
    question = (question || "").trim();
    if (!question) return;
    try { window.sessionStorage.setItem(DRAFT, question); } catch (e) { /* storage off: the box still has it */ }
    if (!box.value.trim()) { box.value = question; fit(); }
  }

  // The session ended: the question stays and the reader is sent to sign in, then back here (a local path).
  function signedOut(question) {
    keep(question || box.value);
    var back = "/" + location.pathname.replace(/^\/+/, "") + location.search;
    var link = el("a", "btn btn-small", gettext("Sign in again"));
    link.href = root.getAttribute("data-login-url") + "?next=" + encodeURIComponent(back);
    link.addEventListener("click", function () { keep(box.value); });
    notice("error", gettext("Your session has ended, so your question was not sent. Sign in again: it will be back in the box."), link);
  }

  // The page's form token is stale (signed in or out in another tab): reloading gets a fresh one.
  function expired(question) {
    keep(question || box.value);
    var reload = el("button", "btn btn-small", gettext("Reload the page"));
    reload.type = "button";
    reload.addEventListener("click", function () { keep(box.value); location.reload(); });
    notice("error", gettext("This page has expired, so your question was not sent. Reload the page: it will be back in the box."), reload);
  }

  // A failed request outside an answer: the next step for a session or a stale page, else the sentence.
  function problem(error, sentence) {
    if (error.kind === "session") signedOut();
    else if (error.kind === "expired") expired();
    else showStatus("error", sentence ? fmt(sentence, { reason: error.message }) : error.message);
  }

  // ---------------------------------------------------------------- rendering an answer

  // A chip for `citation`, shown as `number`: the place it has in its own answer's sources list.
  // A passage's link that names the answer it was opened from: the viewer's "Back to the answer" returns there.
  function fromAnswer(link, turnId) {
    var href = safeLink(link);
    if (!href || !turnId) return href;
    return href + (href.indexOf("#") < 0 ? "#" : "&") + "answer=" + turnId;
  }

  function citationChip(citation, number, turnId) {
    var wrap = el("span", "cite");
    var href = fromAnswer(citation.link, turnId);
    var chip = el(href ? "a" : "span", "cite-chip", "[" + number + "]");
    if (href) chip.href = href;
    chipCount += 1;
    var previewId = "cite-" + turnId + "-" + number + "-" + chipCount;
    chip.setAttribute("aria-describedby", previewId);
    chip.setAttribute("aria-label", fmt(gettext("Source %(number)s: %(title)s"), { number: number, title: citation.document_title }));
    chip.setAttribute("data-number", String(number));
    var preview = el("span", "cite-preview");
    preview.id = previewId;
    preview.setAttribute("role", "tooltip");
    preview.appendChild(el("span", "cite-preview-title", citation.document_title));
    if (citation.label) preview.appendChild(el("span", "cite-preview-crumb", citation.label));
    preview.appendChild(el("span", "cite-preview-quote", citation.quote));
    wrap.appendChild(chip);
    wrap.appendChild(preview);
    return wrap;
  }

  // The stored [n] are the retrieval's numbers (the first source cited may be the third retrieved): each
  // answer numbers its own sources 1..n in the order its text first cites them, the chips and the list alike.
  function numbering(citations) {
    var byNumber = {};
    (citations || []).forEach(function (c) { byNumber[c.number] = c; });
    return {
      order: [], // the citations as first cited
      shown: {}, // stored number -> the number the reader sees
      of: function (stored) {
        var citation = byNumber[stored];
        if (!citation) return 0;
        if (!this.shown[stored]) { this.order.push(citation); this.shown[stored] = this.order.length; }
        return this.shown[stored];
      }
    };
  }

  // Text with [n] chips and `code` spans (the server wraps URLs in backticks: they stay text).
  function renderInline(parent, text, numbers, turnId) {
    var pattern = /\[(\d{1,3})\]|`([^`\n]+)`|\n/g;
    var last = 0;
    var match;
    while ((match = pattern.exec(text))) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      if (match[1] !== undefined) {
        var shown = numbers.of(Number(match[1]));
        if (shown) parent.appendChild(citationChip(numbers.order[shown - 1], shown, turnId));
        // a marker without a visible citation is dropped, as the server does
      } else if (match[2] !== undefined) {
        parent.appendChild(el("code", /^(?:[a-z][a-z0-9+.\-]*:|www\.)|@/i.test(match[2]) ? "inert-url" : "", match[2]));
      } else {
        parent.appendChild(document.createElement("br"));
      }
      last = pattern.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  // A finished answer, streamed or stored (the socket and the conversation API send the same events): its
  // text with chips, then its own sources under it, each linked to its passage in the viewer.
  function renderAnswer(turn) {
    var body = turn.body;
    body.textContent = "";
    var numbers = numbering(turn.citations);
    turn.text.split(/\n\s*\n/).forEach(function (paragraph) {
      if (!paragraph.trim()) return;
      var p = el("p");
      renderInline(p, paragraph.trim(), numbers, turn.id);
      body.appendChild(p);
    });
    if (turn.sourcesNode) turn.sourcesNode.remove();
    turn.sourcesNode = numbers.order.length ? sourcesView(numbers.order, turn.id) : el("p", "turn-sources-none muted", gettext("This answer cites no sources."));
    body.parentNode.insertBefore(turn.sourcesNode, body.nextSibling);
  }

  function sourcesView(cited, turnId) {
    var box = el("div", "turn-sources");
    box.appendChild(el("h3", "turn-sources-title", gettext("Sources")));
    var list = el("ol", "source-list");
    list.setAttribute("aria-label", gettext("Sources for this answer"));
    cited.forEach(function (c, i) {
      var li = el("li", "source-item");
      li.setAttribute("data-number", String(i + 1));
      var href = fromAnswer(c.link, turnId);
      var title = el(href ? "a" : "span", "source-title", c.document_title);
      if (href) title.href = href;
      li.appendChild(title);
      if (c.label) li.appendChild(el("span", "source-crumb", c.label + (c.page ? pageOf(c.page) : "")));
      li.appendChild(el("span", "source-quote", c.quote.length > 240 ? c.quote.slice(0, 240).replace(/\s+\S*$/, "") + " …" : c.quote));
      list.appendChild(li);
    });
    box.appendChild(list);
    return box;
  }

  function clearEmpty() {
    var empty = answerEl.querySelector(".answer-empty");
    if (empty) empty.remove();
  }

  function newTurn(questionText) {
    clearEmpty();
    var node = el("section", "turn");
    var q = el("p", "turn-question");
    q.appendChild(el("span", "visually-hidden", gettext("Question: ")));
    q.appendChild(document.createTextNode(questionText));
    var meta = el("p", "turn-meta muted");
    var body = el("div", "turn-answer");
    node.appendChild(q);
    node.appendChild(meta);
    node.appendChild(body);
    var turn = { id: null, node: node, meta: meta, body: body, text: "", question: questionText, citations: [], finished: false };
    if (earlier) {
      answerEl.insertBefore(node, earlier.before);
      earlier.list.push(turn);
    } else {
      answerEl.appendChild(node);
      turnList.push(turn);
    }
    return turn;
  }

  // The turns events go to now: an earlier page's while it is being shown, else the conversation's.
  function activeTurns() { return earlier ? earlier.list : turnList; }

  function turnFor(messageId) {
    if (turns[messageId]) return turns[messageId];
    var list = activeTurns();
    for (var i = 0; i < list.length; i++) {
      if (list[i].id === null) {
        list[i].id = messageId;
        list[i].node.setAttribute("data-message", String(messageId));
        turns[messageId] = list[i];
        return list[i];
      }
    }
    var turn = newTurn("");
    turn.id = messageId;
    turns[messageId] = turn;
    return turn;
  }

  function setMeta(turn, text, busy) {
    turn.meta.textContent = "";
    if (busy) turn.meta.appendChild(el("span", "spinner"));
    if (text) turn.meta.appendChild(document.createTextNode(text));
    answerEl.setAttribute("aria-busy", busy ? "true" : "false");
  }

  // What wrote the answer, and, once it is finished, how well it matches (`match`, chat.match): an answer that
  // may quote the wrong part of the right passages says so in words, in place of the "quoted" badge.
  // A curated answer (`curated`: by whom, approved when) is support's, written once for questions like this one.
  function backendBadge(turn, backend, notice, match, curated) {
    var old = turn.node.querySelector(".backend-badge");
    if (old) old.remove();
    if (!backend) return;
    var label = backend === "local" ? gettext("Small model, may be wrong") : backend === "extractive" ? gettext("Quoted from sources") : backend === "curated" ? gettext("Answer from support") : gettext("AI answer");
    if (match === "curated" && curated) {
      label = [gettext("Answer from support"), curated.by].concat(curated.approved_at ? [KB.formatDate(curated.approved_at)] : []).join(" · ");
    }
    var badge = el("p", "backend-badge backend-" + backend.replace(/[^a-z0-9]/gi, ""), label);
    if (match === "closest") {
      badge.textContent = gettext("Closest passage — may not answer your question");
      badge.className += " match-closest";
      notice = gettext("The sources below are the closest the assistant found; open them to check before relying on the answer.");
    }
    turn.node.setAttribute("data-match", match || "");
    if (notice) badge.title = notice;
    turn.node.insertBefore(badge, turn.body);
  }

  // Support's own statement with a curated answer ("The data file cannot have two-factor authentication"): theirs,
  // not a document's, so it stands apart from the quotes and cites nothing.
  function statementView(turn, curated) {
    var old = turn.node.querySelector(".curated-statement");
    if (old) old.remove();
    var asked = turn.node.querySelector(".curated-question");
    if (asked) asked.remove();
    // The question support answered: a neighbouring question can be matched, and the reader judges whether it is theirs.
    if (curated && curated.question) {
      var line = el("p", "curated-question muted", gettext("Support's answer to:") + " ");
      line.appendChild(el("q", "", curated.question));
      turn.body.insertBefore(line, turn.body.firstChild);
    }
    if (!curated || !curated.statement) return;
    var box = el("aside", "curated-statement");
    box.setAttribute("aria-label", gettext("Support's statement"));
    box.appendChild(el("p", "curated-statement-label", gettext("Support's statement")));
    box.appendChild(el("p", "", curated.statement));
    turn.body.appendChild(box);
  }

  // A refusal in plain words, never a number (the signals are the reviewers'): nothing near, or, once the
  // search beside it finds passages on the topic (closestView), the middle state: passages, no answer.
  function refusedView(turn) {
    turn.body.textContent = "";
    var box = el("div", "answer-refused");
    box.appendChild(el("p", "answer-refused-title", gettext("I couldn't find this in the documents you can read")));
    box.appendChild(el("p", "answer-refused-lead", gettext("The assistant only answers from documents shared with you, and none of them covers this question, so it did not guess.")));
    var tips = el("ul", "answer-tips");
    [gettext("Use the words the documents would use: a screen, field, setting or error code."),
     gettext("Ask about one thing at a time."),
     gettext("Browse the library, or ask the team that owns the topic: the document may not be shared with you.")].forEach(function (t) {
      tips.appendChild(el("li", "", t));
    });
    box.appendChild(tips);
    turn.body.appendChild(box);
  }

  // Beside a refusal, the passages nearest the question that the asker may read (GET /api/search, so
  // the permissions are checked now, as for any search), if any is near enough to be on its topic: the
  // section is often there, in other words than the question's. A question from elsewhere gets none.
  // `data-closest` on the turn says how many were offered, once the search has answered.
  function closestView(turn) {
    if (!turn.question || turn.closestAsked) return;
    turn.closestAsked = true;
    api("GET", "/api/search?k=3&q=" + encodeURIComponent(turn.question)).then(function (data) {
      var hits = (data.hits || []).filter(function (h) { return h.distance <= data.related_distance && safeLink(h.link); });
      turn.node.setAttribute("data-closest", String(hits.length));
      if (!hits.length) return;
      turn.node.querySelector(".answer-refused-title").textContent = gettext("These passages may help, but none answers it directly");
      turn.node.querySelector(".answer-refused-lead").textContent = gettext("No answer was written: the passages below are the closest you can read on this topic.");
      var box = el("div", "answer-closest");
      box.appendChild(el("p", "answer-closest-title", gettext("Closest passages you can read")));
      var list = el("ol", "closest-list");
      hits.forEach(function (h) {
        var li = el("li", "source-item");
        var title = el("a", "source-title", h.document_title);
        title.href = safeLink(h.link);
        li.appendChild(title);
        if (h.breadcrumb) li.appendChild(el("span", "source-crumb", h.breadcrumb + (h.page ? pageOf(h.page) : "")));
        li.appendChild(el("span", "source-quote", h.content.length > 240 ? h.content.slice(0, 240).replace(/\s+\S*$/, "") + " …" : h.content));
        list.appendChild(li);
      });
      box.appendChild(list);
      turn.body.appendChild(box);
    }).catch(function () { turn.node.setAttribute("data-closest", "0"); });
  }

  // An answer that failed: the reason in words, and "Try again" (the question is sent again).
  function errorView(turn, message) {
    var box = el("div", "alert alert-error answer-error");
    box.setAttribute("role", "alert");
    box.appendChild(el("strong", "", gettext("The answer could not be finished.") + " "));
    box.appendChild(document.createTextNode(message || gettext("Something went wrong.")));
    var retry = el("button", "btn btn-small retry", gettext("Try again"));
    retry.type = "button";
    retry.addEventListener("click", function () { ask(turn.question || lastQuestion); });
    box.appendChild(document.createTextNode(" "));
    box.appendChild(retry);
    turn.body.appendChild(box);
  }

  // ---------------------------------------------------------------- events

  function handle(event) {
    if (!event || typeof event.type !== "string") return;
    trace.events.push(event.type);
    var turn;
    switch (event.type) {
      case "question":
        if (!turnList.concat(earlier ? earlier.list : []).some(function (t) { return t.questionId === event.message; })) {
          var pending = activeTurns().filter(function (t) { return t.questionId === undefined && t.id === null && t.question === event.text; })[0];
          turn = pending || newTurn(event.text);
          turn.questionId = event.message;
        }
        return;
      case "status":
        turn = turnFor(event.message);
        if (turn.finished) return;
        setMeta(turn, event.state === "queued" ? gettext("Waiting for the assistant…") : event.state === "retrieving" ? gettext("Searching the documents you can read…") : gettext("Writing the answer…"), true);
        if (event.backend) backendBadge(turn, event.backend, event.notice);
        return;
      case "token":
        turn = turnFor(event.message);
        if (turn.finished) return;
        if (typeof event.at !== "number" || event.at > turn.text.length) return;
        var add = event.text.slice(turn.text.length - event.at);
        if (!add) return;
        trace.tokensBeforeDone += 1;
        turn.text += add;
        if (!turn.streamNode) {
          turn.body.textContent = "";
          turn.streamNode = el("p", "streaming");
          turn.body.appendChild(turn.streamNode);
        }
        turn.streamNode.textContent = turn.text;
        answerEl.setAttribute("data-length", String(turn.text.length));
        return;
      case "citations":
        turn = turnFor(event.message);
        turn.citations = event.citations || [];
        return;
      case "done":
        turn = turnFor(event.message);
        if (turn.finished) return; // a reconnect's replay: already shown
        turn.finished = true;
        turn.streamNode = null;
        turn.text = event.text || turn.text;
        setMeta(turn, "", false);
        backendBadge(turn, event.backend, event.notice, event.match, event.curated);
        if (event.withheld) {
          turn.body.textContent = "";
          turn.body.appendChild(el("p", "muted", event.text));
        } else {
          renderAnswer(turn);
          statementView(turn, event.curated);
        }
        if (!event.withheld) judgementView(turn, null);
        finish();
        return;
      case "refused":
        turn = turnFor(event.message);
        if (turn.finished) return;
        turn.finished = true;
        turn.refused = true;
        setMeta(turn, "", false);
        refusedView(turn);
        if (!replaying) closestView(turn);
        judgementView(turn, null);
        finish();
        return;
      case "error":
        turn = event.message ? turnFor(event.message) : turnList[turnList.length - 1];
        if (turn && turn.finished && event.message) return;
        if (turn) {
          turn.finished = true;
          setMeta(turn, "", false);
          errorView(turn, event.error);
        } else {
          showStatus("error", event.error);
        }
        finish();
        return;
    }
  }

  // The asker's feedback on a finished answer (KB.feedback, feedback.js): thumbs, a reason chip, their words.
  function judgementView(turn, judgement) {
    if (turn.ratingNode) turn.ratingNode.remove();
    turn.ratingNode = window.KB.feedback({
      message: turn.id, refused: !!turn.refused, judgement: judgement, question: turn.question,
      onError: function (error) { problem(error, gettext("Your feedback was not saved: %(reason)s")); }
    });
    turn.node.appendChild(turn.ratingNode);
  }

  function finish() {
    if (replaying) return;
    busy(false);
    loadHistory().catch(function (error) { problem(error); });
  }

  function busy(on) {
    submit.disabled = on || !box.value.trim();
    form.setAttribute("aria-busy", on ? "true" : "false");
    root.setAttribute("data-busy", on ? "true" : "false");
  }

  // ---------------------------------------------------------------- socket

  function connect(conversationId, since) {
    if (socket && socketFor === conversationId && socket.readyState <= 1) return;
    if (socket) socket.close();
    clearTimeout(reconnectTimer);
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var path = root.getAttribute("data-ws-path").replace("{conversation}", String(conversationId));
    var url = scheme + location.host + path + (since ? "?since=" + since : "");
    var ws = new WebSocket(url);
    socket = ws;
    socketFor = conversationId;
    ws.addEventListener("message", function (message) {
      if (dropped) { dropped = false; reconnects = 0; notice(null, ""); } // delivering again: the connection is back
      var data;
      try { data = JSON.parse(message.data); } catch (e) { return; }
      handle(data);
    });
    ws.addEventListener("close", function (event) {
      if (socket !== ws) return;
      socket = null;
      if (event.code === 4401) { signedOut(); return; } // accounts.websocket: the session ended
      var open = turnList.filter(function (t) { return t.id !== null && !t.finished; });
      if (!open.length || event.code === 1000 || event.code === 4403) return;
      if (event.code === 4408) connect(conversationId); // the reader's groups changed: reconnect to read as they are now
      else reconnect(conversationId);
    });
  }

  // A socket that dropped while an answer is written: try again after 1, 2, 4… seconds (the server replays
  // what was stored, offsets drop what is shown), then stop and let the reader try again.
  function reconnect(conversationId) {
    if (conversation !== conversationId) return;
    dropped = true;
    if (reconnects >= RECONNECT_DELAYS.length) {
      var retry = el("button", "btn btn-small", gettext("Try again"));
      retry.type = "button";
      retry.addEventListener("click", function () {
        reconnects = 0;
        notice("info", gettext("Reconnecting…"));
        connect(conversationId);
      });
      notice("error", gettext("The connection to the assistant was lost and could not be restored. Check your network, then try again."), retry);
      return;
    }
    notice("info", gettext("Connection lost — reconnecting…"));
    reconnectTimer = setTimeout(function () {
      if (conversation === conversationId && !socket) connect(conversationId);
    }, RECONNECT_DELAYS[reconnects] * 1000);
    reconnects += 1;
  }

  // ---------------------------------------------------------------- asking

  function ask(question) {
    question = (question || "").trim();
    if (!question) return;
    lastQuestion = question;
    busy(true);
    showStatus(null, "");
    var turn = newTurn(question);
    setMeta(turn, gettext("Sending…"), true);
    turn.node.scrollIntoView({ block: "nearest", behavior: "instant" });
    var body = { question: question };
    if (conversation) body.conversation = conversation;
    api("POST", root.getAttribute("data-ask-url"), body).then(function (data) {
      turn.id = data.message;
      turn.questionId = data.question;
      turn.node.setAttribute("data-message", String(data.message));
      turns[data.message] = turn;
      if (conversation !== data.conversation) {
        conversation = data.conversation;
        currentTitle = question;
        conversationBar();
        history.replaceState(null, "", "?c=" + conversation);
        connect(conversation, data.question - 1);
      } else if (!socket) {
        connect(conversation, data.question - 1);
      }
      loadHistory().catch(function (e) { problem(e); });
    }).catch(function (error) {
      if (error.kind === "session" || error.kind === "expired") {
        // Nothing was asked: the turn goes, the question stays in the box for after signing in or reloading.
        turn.node.remove();
        turnList.splice(turnList.indexOf(turn), 1);
        if (!turnList.length && emptyView) answerEl.appendChild(emptyView);
        if (error.kind === "session") signedOut(question);
        else expired(question);
        busy(false);
        return;
      }
      busy(false);
      turn.finished = true;
      setMeta(turn, "", false);
      errorView(turn, error.message);
    });
  }

  // ---------------------------------------------------------------- history

  // The reader's conversations, grouped by the day they were last active in (the page's time zone, as its dates
  // are written: KB.formatDate): Today, Yesterday, Previous 7 days, then one group a month. `q` narrows them to
  // those whose title or a question holds every word (GET /api/conversations?q=, the reader's own only).
  var HISTORY_PAGE = 50;
  var historyShown = HISTORY_PAGE; // conversations listed: "Show older conversations" adds a page
  var historyQuery = "";
  var historySearch = document.getElementById("history-q");
  var historyMore = document.getElementById("history-more");
  var currentTitle = "";
  var zone = window.KB.timeZone() || undefined;
  try { new Intl.DateTimeFormat("en", { timeZone: zone }); } catch (e) { zone = undefined; } // unknown here: the browser's
  var dayParts = new Intl.DateTimeFormat("en-US", { timeZone: zone, year: "numeric", month: "numeric", day: "numeric" });
  var monthName = new Intl.DateTimeFormat(lang, { timeZone: zone, year: "numeric", month: "long" });
  var clock = new Intl.DateTimeFormat(lang, { timeZone: zone, timeStyle: "short" });

  function dayOf(date) { // {year, month, day, n: days since 1970} of `date` in the page's time zone
    var parts = {};
    dayParts.formatToParts(date).forEach(function (part) { parts[part.type] = Number(part.value); });
    parts.n = Date.UTC(parts.year, parts.month - 1, parts.day) / 86400000;
    return parts;
  }

  function dayGroup(date, now) {
    var day = dayOf(date), ago = dayOf(now).n - day.n;
    if (ago <= 0) return { key: "today", label: gettext("Today") };
    if (ago === 1) return { key: "yesterday", label: gettext("Yesterday") };
    if (ago <= 7) return { key: "week", label: gettext("Previous 7 days") };
    return { key: day.year + "-" + day.month, label: monthName.format(date) };
  }

  // Titles that begin alike (the same question again, about another place or name) look the same cut to the
  // list's width: each such title gets the words from where it parts from the others as a line of its own.
  function distinctTails(items) {
    var tails = {};
    items.forEach(function (a) {
      var shared = 0;
      items.forEach(function (b) {
        if (a === b) return;
        var n = 0;
        while (n < a.title.length && a.title[n] === b.title[n]) n++;
        shared = Math.max(shared, n);
      });
      if (shared >= 30 && shared < a.title.length) tails[a.id] = "…" + a.title.slice(a.title.lastIndexOf(" ", shared - 1) + 1);
    });
    return tails;
  }

  function historyItem(item, group, tail) {
    var title = item.title || fmt(gettext("Conversation %(id)s"), { id: item.id });
    var li = el("li", item.id === conversation ? "history-item current" : "history-item");
    var link = el("a", "history-link");
    link.appendChild(el("span", tail ? "history-title history-title-short" : "history-title", title));
    if (tail) link.appendChild(el("span", "history-tail", tail));
    link.href = location.pathname + "?c=" + item.id;
    link.title = title; // the whole title: the list shows two lines of it
    if (item.id === conversation) link.setAttribute("aria-current", "page");
    link.setAttribute("data-conversation", String(item.id));
    link.addEventListener("click", function (event) {
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return; // a new tab
      event.preventDefault();
      showHistory(false);
      openConversation(item.id);
    });
    li.appendChild(link);
    var when = new Date(item.updated_at);
    var recent = group.key === "today" || group.key === "yesterday";
    var stamp = recent ? clock.format(when) : window.KB.formatDate(item.updated_at);
    var asked = fmt(ngettext("%(count)s question", "%(count)s questions", item.questions), { count: item.questions });
    li.appendChild(el("span", "history-when muted", stamp + " · " + asked));
    return li;
  }

  function loadHistory() {
    var query = historyQuery;
    var url = "/api/conversations?limit=" + historyShown + (query ? "&q=" + encodeURIComponent(query) : "");
    return api("GET", url).then(function (items) {
      if (query !== historyQuery) return; // a newer search is on its way
      historyEl.textContent = "";
      if (historyMore) historyMore.hidden = items.length < historyShown || historyShown >= 200;
      var mine = items.filter(function (item) { return item.id === conversation; })[0];
      if (mine) { currentTitle = mine.title; conversationBar(); }
      if (!items.length) {
        historyEl.appendChild(el("p", "history-empty muted", query ? gettext("No conversation matches your search.") : gettext("Your past questions will be listed here.")));
        return;
      }
      var now = new Date(), list = null, last = null, tails = distinctTails(items);
      items.forEach(function (item) {
        var group = dayGroup(new Date(item.updated_at), now);
        if (!last || group.key !== last) {
          last = group.key;
          var section = el("section", "history-group");
          var heading = el("h3", "history-group-title", group.label);
          heading.id = "history-group-" + group.key;
          section.setAttribute("aria-labelledby", heading.id);
          list = el("ol", "history-list");
          section.appendChild(heading);
          section.appendChild(list);
          historyEl.appendChild(section);
        }
        list.appendChild(historyItem(item, group, tails[item.id]));
      });
    });
  }

  if (historySearch) {
    var searchTimer = null;
    historySearch.addEventListener("input", function () {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(function () {
        historyQuery = historySearch.value.trim();
        historyShown = HISTORY_PAGE;
        loadHistory().catch(function (error) { problem(error); });
      }, 250);
    });
  }
  if (historyMore) {
    historyMore.addEventListener("click", function () {
      historyShown = Math.min(historyShown + HISTORY_PAGE, 200);
      loadHistory().catch(function (error) { problem(error); });
    });
  }

  // On a narrow screen the history is a panel the "History" button opens, one tap away; Escape or Close shuts it.
  var historyToggle = document.getElementById("history-toggle");
  var historyClose = document.getElementById("history-close");
  function showHistory(open) {
    if (!historyToggle || (root.getAttribute("data-history") === "open") === open) return;
    root.setAttribute("data-history", open ? "open" : "closed");
    historyToggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (open && historySearch) historySearch.focus();
    else if (!open && getComputedStyle(historyToggle).display !== "none") historyToggle.focus();
  }
  if (historyToggle) historyToggle.addEventListener("click", function () { showHistory(root.getAttribute("data-history") !== "open"); });
  if (historyClose) historyClose.addEventListener("click", function () { showHistory(false); });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && root.getAttribute("data-history") === "open") showHistory(false);
  });

  // ---------------------------------------------------------------- the open conversation: rename, delete

  var bar = document.getElementById("conversation-bar");
  var barTitle = document.getElementById("conversation-title");
  var barActions = document.getElementById("conversation-actions");
  var renameButton = document.getElementById("conversation-rename");
  var deleteButton = document.getElementById("conversation-delete");

  // The bar as it is at rest: the title (whole on hover) and the two buttons.
  function conversationBar() {
    if (!bar) return;
    bar.hidden = !conversation;
    var form = bar.querySelector(".conversation-rename-form");
    if (form) return; // being renamed: left as the reader has it
    barTitle.hidden = false;
    barTitle.textContent = currentTitle;
    barTitle.title = currentTitle;
    if (barActions.children.length === 2 && renameButton.parentNode === barActions) return; // keeps the focus
    barActions.textContent = "";
    barActions.appendChild(renameButton);
    barActions.appendChild(deleteButton);
  }

  function renameStart() {
    var form = el("form", "conversation-rename-form");
    var label = el("label", "visually-hidden", gettext("Conversation title"));
    var input = el("input");
    input.id = "conversation-title-input";
    label.htmlFor = input.id;
    input.type = "text";
    input.maxLength = 200;
    input.required = true;
    input.value = currentTitle;
    var save = el("button", "btn btn-small btn-primary", gettext("Save"));
    save.type = "submit";
    var cancel = el("button", "btn btn-small btn-ghost", gettext("Cancel"));
    cancel.type = "button";
    [label, input, save, cancel].forEach(function (node) { form.appendChild(node); });
    function done() { form.remove(); conversationBar(); renameButton.focus(); }
    cancel.addEventListener("click", done);
    input.addEventListener("keydown", function (event) { if (event.key === "Escape") { event.stopPropagation(); done(); } });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var title = input.value.trim();
      if (!title) { input.focus(); return; }
      save.disabled = true;
      api("PATCH", "/api/conversations/" + conversation, { title: title }).then(function (data) {
        currentTitle = data.title;
        done();
        loadHistory().catch(function (e) { problem(e); });
      }).catch(function (error) {
        save.disabled = false;
        problem(error, gettext("The conversation was not renamed: %(reason)s"));
      });
    });
    barTitle.hidden = true;
    barActions.textContent = "";
    bar.insertBefore(form, barActions);
    input.focus();
    input.select();
  }

  function deleteStart() {
    var id = conversation;
    var question = el("span", "conversation-confirm", gettext("Delete this conversation for good?"));
    var yes = el("button", "btn btn-small btn-danger", gettext("Delete"));
    yes.type = "button";
    var no = el("button", "btn btn-small btn-ghost", gettext("Cancel"));
    no.type = "button";
    barActions.textContent = "";
    [question, yes, no].forEach(function (node) { barActions.appendChild(node); });
    no.addEventListener("click", function () { conversationBar(); deleteButton.focus(); });
    yes.addEventListener("click", function () {
      yes.disabled = true;
      api("DELETE", "/api/conversations/" + id).then(function () {
        if (conversation === id) startOver();
        showStatus("info", gettext("The conversation was deleted."));
        loadHistory().catch(function (e) { problem(e); });
      }).catch(function (error) {
        conversationBar();
        problem(error, gettext("The conversation was not deleted: %(reason)s"));
      });
    });
    no.focus();
  }

  if (renameButton) renameButton.addEventListener("click", renameStart);
  if (deleteButton) deleteButton.addEventListener("click", deleteStart);

  // A new, empty conversation: what the page shows before the first question.
  function startOver() {
    if (socket) { var old = socket; socket = null; old.close(1000); }
    conversation = null;
    currentTitle = "";
    history.replaceState(null, "", location.pathname);
    answerEl.textContent = "";
    if (emptyView) answerEl.appendChild(emptyView);
    turns = {};
    turnList = [];
    conversationBar();
    busy(false);
    box.focus();
  }

  // The latest turn at the top of the view, its answer below it: where a reader left the conversation. Back from
  // a passage (`#answer-ID`, the viewer's "Back to the answer"), the answer it was opened from, with the focus.
  function showLatest() {
    var named = /^#answer-(\d+)$/.exec(location.hash);
    var back = named && turns[Number(named[1])];
    var last = back || turnList[turnList.length - 1];
    if (!last) return;
    last.node.scrollIntoView({ block: "start", behavior: "instant" });
    if (back) {
      back.node.setAttribute("tabindex", "-1");
      back.node.focus({ preventScroll: true });
    }
  }

  // A page of stored messages, each shown through the same events the socket sends for it (the REST
  // payload carries them); returns the id of the first answer still being written, if any.
  function showMessages(data) {
    var resume = null;
    replaying = true;
    try {
      data.messages.forEach(function (m) {
        m.events.forEach(handle);
        // The asker is sent their own verdict only.
        if (m.role === "assistant" && m.judgements && m.judgements.length) judgementView(turnFor(m.id), m.judgements[0]);
        if (resume === null && (m.status === "pending" || m.status === "running")) resume = m.id;
      });
    } finally { replaying = false; }
    var last = earlier ? null : turnList[turnList.length - 1];
    if (last && last.refused) closestView(last); // the latest refusal, as it was shown when it came
    earlierButton(data.before);
    return resume;
  }

  // Long conversations come a page at a time: this button above the oldest shown brings the page before.
  function earlierButton(before) {
    var old = answerEl.querySelector(".turn-earlier");
    if (old) old.remove();
    if (before === null || before === undefined) return;
    var button = el("button", "btn btn-small btn-ghost turn-earlier", gettext("Show earlier messages"));
    button.type = "button";
    button.addEventListener("click", function () {
      var id = conversation;
      button.disabled = true;
      api("GET", "/api/conversations/" + id + "?before=" + before).then(function (data) {
        if (conversation !== id) return;
        earlier = { before: answerEl.firstChild, list: [] };
        try { showMessages(data); } finally {
          turnList = earlier.list.concat(turnList);
          earlier = null;
        }
      }).catch(function (error) {
        button.disabled = false;
        problem(error, gettext("The earlier messages could not be loaded: %(reason)s"));
      });
    });
    answerEl.insertBefore(button, answerEl.firstChild);
  }

  function openConversation(id) {
    return api("GET", "/api/conversations/" + id).then(function (data) {
      if (socket) { var old = socket; socket = null; old.close(1000); }
      conversation = data.id;
      currentTitle = data.title;
      conversationBar();
      var back = /^#answer-\d+$/.test(location.hash) ? location.hash : "";  // kept until the answer has the focus
      history.replaceState(null, "", "?c=" + conversation + back);
      answerEl.textContent = "";
      turns = {};
      turnList = [];
      var resume = showMessages(data);
      busy(false);
      showLatest();
      if (back) history.replaceState(null, "", "?c=" + conversation);
      loadHistory().catch(function (e) { problem(e); });
      // An answer still being written: the socket replays it from there and streams the rest.
      if (resume !== null) connect(conversation, resume - 1);
    }).catch(function (error) { problem(error, gettext("That conversation could not be opened: %(reason)s")); });
  }

  // ---------------------------------------------------------------- form

  function fit() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight + 2, 240) + "px";
  }

  box.addEventListener("input", function () {
    fit();
    if (root.getAttribute("data-busy") !== "true") submit.disabled = !box.value.trim();
  });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (!submit.disabled) form.requestSubmit(submit);
    }
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (root.getAttribute("data-state") !== "connected" || root.getAttribute("data-busy") === "true") return;
    var question = box.value;
    box.value = "";
    fit();
    ask(question);
  });

  var newLink = document.querySelector(".history-new");
  if (newLink) newLink.setAttribute("href", location.pathname);

  // A question kept while the reader signed in again (or reloaded): back in the box, not sent.
  var draft = null;
  try { draft = window.sessionStorage.getItem(DRAFT); window.sessionStorage.removeItem(DRAFT); } catch (e) { draft = null; }
  if (draft && !box.value.trim()) { box.value = draft; fit(); }

  loadHistory().then(function () {
    setState("connected");
    showStatus(null, "");
    submit.disabled = !box.value.trim();
    var wanted = new URLSearchParams(location.search).get("c");
    if (wanted && /^\d+$/.test(wanted)) openConversation(Number(wanted));
  }).catch(function (error) {
    setState("disconnected");
    if (error.kind === "session" || error.kind === "expired") { showStatus(null, ""); problem(error); return; }
    showStatus("error", gettext("The assistant can't be reached right now. Reload the page to try again; the library still works."));
  });
})();
