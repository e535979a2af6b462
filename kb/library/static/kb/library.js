/* Library, for admins: drag-and-drop upload of several files (one request per file, so each
 * has its own progress bar), then each document's pipeline status live over /ws/library/.
 * The server decides everything (validation, access, what a user may follow); this file
 * only shows it. */
(function () {
  "use strict";
  var panel = document.getElementById("upload");
  if (!panel) return;

  var form = document.getElementById("upload-form");
  var input = document.getElementById("upload-files");
  var zone = document.getElementById("dropzone");
  var queue = document.getElementById("upload-queue");
  var startButton = document.getElementById("upload-start");
  var clearButton = document.getElementById("upload-clear");
  var problem = document.getElementById("upload-problem");
  var folderSelect = document.getElementById("upload-folder");
  var audience = document.getElementById("folder-audience");
  var restricted = document.getElementById("restricted");
  var accessFolder = document.getElementById("access-folder");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  var maxBytes = parseInt(panel.getAttribute("data-max-bytes"), 10) || Infinity;
  var maxMb = panel.getAttribute("data-max-mb");
  // The kinds the server accepts (kb.library.ingest.extract.SUPPORTED): a file of another kind is refused as it is
  // chosen. The server checks every upload again (type, size, content); this only saves a pointless wait.
  var extensions = (panel.getAttribute("data-extensions") || "").split(",").filter(Boolean);
  // The page's language (Django's JavaScriptCatalog, /jsi18n/, loaded before this file).
  var gettext = window.gettext, interpolate = window.interpolate;
  function fmt(text, values) { return interpolate(text, values, true); }
  var lang = document.documentElement.lang || undefined;

  var LABELS = {
    queued: gettext("Queued"),
    extracting: gettext("Extracting text"),
    chunking: gettext("Splitting into passages"),
    embedding: gettext("Embedding passages"),
    ready: gettext("Ready"),
    failed: gettext("Failed")
  };
  // A failed document's line, per stage (the page's first rendering has the same: kb_ui.failure_line).
  var FAILED_AT = {
    queued: gettext("Failed while queued: %(reason)s"),
    extracting: gettext("Failed while extracting: %(reason)s"),
    chunking: gettext("Failed while chunking: %(reason)s"),
    embedding: gettext("Failed while embedding: %(reason)s"),
    "": gettext("Failed while processing: %(reason)s")
  };
  var STEPS = ["queued", "extracting", "chunking", "embedding", "ready"];
  var TERMINAL = { ready: true, failed: true };
  var items = [];          // {file, el, state, docId}
  var parallel = 3;        // uploads in flight at once

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text != null) node.textContent = text;
    return node;
  }

  function size(bytes) {
    var one = { minimumFractionDigits: 1, maximumFractionDigits: 1, useGrouping: false };
    if (bytes < 1024) return bytes + " B";
    if (bytes < 1048576) return (bytes / 1024).toLocaleString(lang, one) + " KB";
    return (bytes / 1048576).toLocaleString(lang, one) + " MB";
  }

  /* ------------------------------------------------------------ access choice */

  function syncAccess() {
    var option = folderSelect.options[folderSelect.selectedIndex];
    var hasFolder = !!folderSelect.value;
    accessFolder.disabled = !hasFolder;
    if (!hasFolder && accessFolder.checked) accessFolder.checked = false;
    if (hasFolder && !form.querySelector("input[name=access]:checked")) accessFolder.checked = true;
    audience.textContent = hasFolder ? "(" + option.getAttribute("data-audience") + ")" : "";
    var choice = form.querySelector("input[name=access]:checked");
    restricted.hidden = !(choice && choice.value === "restricted");
  }

  folderSelect.addEventListener("change", syncAccess);
  form.addEventListener("change", function (event) {
    if (event.target.name === "access") syncAccess();
  });
  syncAccess();

  function accessProblem() {
    var choice = form.querySelector("input[name=access]:checked");
    if (!choice) return gettext("Choose who can read these documents.");
    if (choice.value === "restricted" &&
        !form.querySelector("input[name=groups]:checked") &&
        !Array.prototype.some.call(document.getElementById("upload-users").options, function (o) { return o.selected; })) {
      return gettext("Choose at least one group or person who can read these documents.");
    }
    return "";
  }

  /* ------------------------------------------------------------ the queue */

  function refreshButtons() {
    var staged = items.filter(function (item) { return item.state === "staged"; }).length;
    startButton.disabled = staged === 0;
    startButton.textContent = staged > 1 ? fmt(window.ngettext("Upload %(count)s file", "Upload %(count)s files", staged), { count: staged }) : gettext("Upload");
    clearButton.hidden = !items.some(finished);
  }

  function finished(item) {
    return item.state === "rejected" || (item.state === "sent" && TERMINAL[item.status]);
  }

  function addFiles(files) {
    problem.hidden = true;
    Array.prototype.forEach.call(files, function (file) {
      var item = { file: file, state: "staged", status: "", docId: null };
      var li = el("li", "upload-item");
      li.setAttribute("data-state", "staged");
      var head = el("div", "upload-name");
      head.appendChild(document.createTextNode(file.name));
      head.appendChild(el("span", "upload-size", size(file.size)));
      var remove = el("button", "upload-remove", "\u00d7");
      remove.type = "button";
      remove.setAttribute("aria-label", fmt(gettext("Remove %(name)s"), { name: file.name }));
      remove.addEventListener("click", function () {
        items.splice(items.indexOf(item), 1);
        li.remove();
        refreshButtons();
      });
      var bar = el("progress");
      bar.max = 100;
      bar.value = 0;
      bar.setAttribute("aria-label", fmt(gettext("Upload of %(name)s"), { name: file.name }));
      var line = el("div", "upload-line");
      var status = el("span", "status status-queued", gettext("Ready to upload"));
      status.setAttribute("data-role", "status");
      var open = el("a", "btn btn-small btn-ghost", gettext("Open"));
      open.hidden = true;
      open.setAttribute("data-role", "open");
      var retry = el("button", "btn btn-small", gettext("Retry"));
      retry.type = "button";
      retry.hidden = true;
      retry.setAttribute("data-action", "retry");
      var reason = el("p", "status-reason");
      reason.hidden = true;
      reason.setAttribute("data-role", "reason");
      line.appendChild(status);
      line.appendChild(open);
      line.appendChild(retry);
      line.appendChild(reason);
      li.appendChild(head);
      li.appendChild(remove);
      li.appendChild(bar);
      li.appendChild(line);
      item.el = li;
      items.push(item);
      queue.appendChild(li);
      var refusal = refusedAtOnce(file);
      if (refusal) reject(item, refusal);
    });
    refreshButtons();
  }

  // Why a chosen file cannot be uploaded, as the server would say it (kb.library.services.upload_validate); "" if it may.
  function refusedAtOnce(file) {
    var dot = file.name.lastIndexOf(".");
    var ext = dot > 0 ? file.name.slice(dot).toLowerCase() : "";
    var allowed = extensions.join(", ");
    if (extensions.length && !ext) {
      return fmt(gettext("%(name)s: files without an extension are not supported (supported: %(allowed)s)"), { name: file.name, allowed: allowed });
    }
    if (extensions.length && extensions.indexOf(ext) < 0) {
      return fmt(gettext("%(name)s: %(ext)s files are not supported (supported: %(allowed)s)"), { name: file.name, ext: ext, allowed: allowed });
    }
    if (file.size > maxBytes) {
      return fmt(gettext("%(name)s: the file is %(size)s; the limit is %(limit)s MB"), { name: file.name, size: size(file.size), limit: maxMb });
    }
    if (file.size === 0) return fmt(gettext("%(name)s: the file is empty"), { name: file.name });
    return "";
  }

  // Why the server refused a request, in words with a next step (never a status code): its own `error` when
  // it wrote one, the reference of a server error (kb.errors) for the admin, or what to do after a sign-out.
  function refused(xhr, body, otherwise) {
    if (xhr.status === 401 || /\/accounts\/login\//.test(xhr.responseURL || "")) {
      return gettext("You were signed out. Reload the page, sign in and try again.");
    }
    if (body && typeof body.error === "string") return body.error;
    if (xhr.status === 403) return gettext("This page has expired. Reload the page and try again.");
    if (xhr.status >= 500) {
      return body && typeof body.reference === "string"
        ? fmt(gettext("Something went wrong on our side. If it keeps happening, give your administrator this reference: %(reference)s."), { reference: body.reference })
        : gettext("The server could not handle this just now. Try again in a moment.");
    }
    return otherwise;
  }

  function part(item, role) { return item.el.querySelector("[data-role=" + role + "]"); }

  function reject(item, message) {
    item.state = "rejected";
    item.el.setAttribute("data-state", "rejected");
    var status = part(item, "status");
    status.className = "status status-failed";
    status.textContent = gettext("Not uploaded");
    var reason = part(item, "reason");
    reason.textContent = message;
    reason.hidden = false;
    refreshButtons();
  }

  function upload(item) {
    return new Promise(function (done) {
      item.state = "uploading";
      item.el.setAttribute("data-state", "uploading");
      var remove = item.el.querySelector(".upload-remove");
      if (remove) remove.remove();
      var status = part(item, "status");
      status.className = "status status-uploading";
      status.textContent = gettext("Uploading…");
      var bar = item.el.querySelector("progress");
      var data = new FormData(form);
      data.delete("file");
      data.append("file", item.file, item.file.name);
      var xhr = new XMLHttpRequest();
      xhr.open("POST", panel.getAttribute("data-upload-url"));
      xhr.setRequestHeader("X-CSRFToken", csrf);
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.addEventListener("progress", function (event) {
        if (event.lengthComputable && event.total) bar.value = Math.round((event.loaded / event.total) * 100);
      });
      xhr.upload.addEventListener("load", function () {
        bar.value = 100;
        status.textContent = gettext("Checking the file…");
      });
      xhr.addEventListener("load", function () {
        var body = null;
        try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
        if ((xhr.status === 200 || xhr.status === 201) && body && body.document) {
          bar.value = 100;
          item.state = "sent";
          item.docId = body.document.id;
          item.el.setAttribute("data-doc-id", String(item.docId));
          part(item, "open").href = body.url;
          show(body.document);
          if (!body.queued) {
            status.textContent = gettext("Already in the library, unchanged");
          }
          watch([item.docId]);
        } else {
          reject(item, refused(xhr, body, gettext("The upload was not accepted. Try again.")));
        }
        done();
      });
      xhr.addEventListener("error", function () {
        reject(item, fmt(gettext("%(name)s: the connection was lost during the upload. Try again."), { name: item.file.name }));
        done();
      });
      xhr.send(data);
    });
  }

  function start() {
    var message = accessProblem();
    if (message) {
      problem.textContent = message;
      problem.hidden = false;
      return;
    }
    problem.hidden = true;
    var pending = items.filter(function (item) { return item.state === "staged"; });
    pending.forEach(function (item) { item.state = "waiting"; });
    refreshButtons();
    function next() {
      var item = pending.shift();
      return item ? upload(item).then(next) : Promise.resolve();
    }
    for (var i = 0; i < parallel; i++) next();
  }

  startButton.addEventListener("click", start);
  clearButton.addEventListener("click", function () {
    items.filter(finished).forEach(function (item) {
      item.el.remove();
      items.splice(items.indexOf(item), 1);
    });
    refreshButtons();
  });

  input.addEventListener("change", function () {
    addFiles(input.files);
    input.value = "";
  });
  ["dragenter", "dragover"].forEach(function (name) {
    zone.addEventListener(name, function (event) {
      event.preventDefault();
      zone.classList.add("is-over");
    });
  });
  ["dragleave", "dragend"].forEach(function (name) {
    zone.addEventListener(name, function () { zone.classList.remove("is-over"); });
  });
  zone.addEventListener("drop", function (event) {
    event.preventDefault();
    zone.classList.remove("is-over");
    if (event.dataTransfer && event.dataTransfer.files.length) addFiles(event.dataTransfer.files);
  });
  // A file dropped beside the zone must not navigate away from the page.
  window.addEventListener("dragover", function (event) { event.preventDefault(); });
  window.addEventListener("drop", function (event) { event.preventDefault(); });

  /* ------------------------------------------------------------ live status */

  function show(doc) {
    var label = LABELS[doc.status] || doc.status;
    if (doc.status === "embedding" && doc.to_embed) label += " " + fmt(gettext("(%(done)s of %(total)s chunks)"), { done: doc.embedded, total: doc.to_embed });
    var step = STEPS.indexOf(doc.status);
    var failedText = doc.status === "failed"
      ? fmt(FAILED_AT[doc.stage || ""] || gettext("Failed while %(stage)s: %(reason)s"),
            { stage: doc.stage, reason: doc.reason || gettext("no reason was recorded") })
      : "";
    items.forEach(function (item) {
      if (item.docId !== doc.id) return;
      item.status = doc.status;
      item.el.setAttribute("data-status", doc.status);
      var status = part(item, "status");
      status.className = "status status-" + doc.status;
      status.textContent = step > 0 && step < 4 ? label + " \u00b7 " + fmt(gettext("step %(step)s of 5"), { step: step + 1 }) : label;
      var reason = part(item, "reason");
      reason.textContent = failedText;
      reason.hidden = !failedText;
      item.el.querySelector("[data-action=retry]").hidden = doc.status !== "failed";
      part(item, "open").hidden = doc.status !== "ready";
    });
    var rows = document.querySelectorAll(".doc-row[data-doc-id='" + doc.id + "']");
    Array.prototype.forEach.call(rows, function (row) {
      row.setAttribute("data-status", doc.status);
      var status = row.querySelector("[data-role=status]");
      if (status) {
        status.className = "status status-" + doc.status;
        status.textContent = label;
      }
      var reason = row.querySelector("[data-role=reason]");
      if (reason) {
        reason.textContent = failedText;
        reason.hidden = !failedText;
      }
      var retry = row.querySelector("[data-action=retry]");
      if (retry) retry.hidden = doc.status !== "failed";
      var replace = row.querySelector("[data-action=replace]");
      if (replace) replace.hidden = doc.status !== "failed";
    });
    refreshButtons();
  }

  var socket = null, watched = {}, attempts = 0;
  var pushed = {}; // document id -> live updates received: a reply that left before one of them is older

  function send(ids) {
    if (socket && socket.readyState === WebSocket.OPEN && ids.length) {
      socket.send(JSON.stringify({ type: "watch", ids: ids }));
    }
  }

  function watch(ids) {
    ids.forEach(function (id) { watched[id] = true; });
    send(ids);
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + panel.getAttribute("data-ws-path"));
    panel.setAttribute("data-live", "connecting");
    socket.addEventListener("open", function () {
      attempts = 0;
      panel.setAttribute("data-live", "open");
      send(Object.keys(watched).map(Number));
    });
    socket.addEventListener("message", function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message && message.type === "document") {
        pushed[message.id] = (pushed[message.id] || 0) + 1;
        show(message);
      }
    });
    socket.addEventListener("close", function (event) {
      panel.setAttribute("data-live", "closed");
      if (event.code === 4401) return; // signed out: a reload shows the login page
      setTimeout(connect, Math.min(10000, 500 * Math.pow(2, attempts++)));
    });
  }

  // Documents on the page that are still moving through the pipeline.
  var moving = document.querySelectorAll(".doc-row[data-doc-id]");
  Array.prototype.forEach.call(moving, function (row) {
    if (!TERMINAL[row.getAttribute("data-status")]) watched[row.getAttribute("data-doc-id")] = true;
  });
  connect();

  /* ------------------------------------------------------------ retry */

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action=retry]");
    if (!button) return;
    var row = button.closest("[data-doc-id]");
    var id = button.getAttribute("data-id") || (row && row.getAttribute("data-doc-id"));
    if (!id) return;
    button.disabled = true;
    var before = pushed[id] || 0;
    var xhr = new XMLHttpRequest();
    xhr.open("POST", panel.getAttribute("data-retry-url").replace("{id}", id));
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.addEventListener("load", function () {
      button.disabled = false;
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status === 200 && body && body.document) {
        // The worker may have claimed (or failed) the document before this reply arrived: its live
        // update is newer than the reply's "queued", which must not overwrite it.
        if ((pushed[body.document.id] || 0) === before) show(body.document);
        watch([body.document.id]);
      } else {
        var reason = row && row.querySelector("[data-role=reason]");
        if (reason) {
          reason.textContent = refused(xhr, body, gettext("Could not retry. Try again in a moment."));
          reason.hidden = false;
        }
      }
    });
    xhr.addEventListener("error", function () {
      button.disabled = false;
      var reason = row && row.querySelector("[data-role=reason]");
      if (reason) {
        reason.textContent = gettext("The server could not be reached. Check your connection and try again.");
        reason.hidden = false;
      }
    });
    xhr.send();
  });
})();
