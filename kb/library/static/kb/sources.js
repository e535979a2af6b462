// Live progress of source runs where a page shows them (the Source admin, the library): elements marked
// data-source-run / data-source-lag with a source id are refreshed from /api/sources, every second while
// a run goes on and every 5 s otherwise. The API applies the staff rule; what it does not list stays as rendered.
"use strict";
(() => {
  const RUNNING_MS = 1000, IDLE_MS = 5000;
  // The library loads Django's catalog (/jsi18n/) first; the admin's source list may not, and then the sentences
  // stay in English, as the catalog would give them. Looked up when used: the admin loads this in <head>.
  const gettext = (text) => (window.gettext ? window.gettext(text) : text);
  const fmt = (text, values) => text.replace(/%\((\w+)\)s/g, (_, name) => String(values[name]));
  const lang = () => document.documentElement.lang || undefined;
  const number = (value) => Number(value).toLocaleString(lang());
  const STATUS = () => ({ running: gettext("running"), ok: gettext("ok"), failed: gettext("failed"),
                          held: gettext("held") });
  const STEP = () => ({ listing: gettext("listing"), applying: gettext("applying"), indexing: gettext("indexing") });
  const marked = (name) => Array.from(document.querySelectorAll(`[data-source-${name}]`));

  const el = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  function counts(run) {
    const values = {};
    for (const [key, value] of Object.entries(run)) values[key] = typeof value === "number" ? number(value) : value;
    values.step = STEP()[run.step] || run.step;
    if (run.status === "running") {
      return fmt(gettext("%(step)s: listed %(listed)s · %(planned)s changes · indexed %(indexed)s of %(to_index)s · failed %(failed)s"), values);
    }
    return fmt(gettext(
      "listed %(listed)s · unchanged %(unchanged)s · changed %(changed)s · new %(new)s · deleted %(deleted)s · renamed %(renamed)s · failed %(failed)s · chunks embedded %(chunks_embedded)s"), values);
  }

  function showRun(node, source) {
    const run = source.last_run;
    if (!run.status) { node.replaceChildren(gettext("never run")); return; }
    // kb-* classes style it in the admin, status-* in the library
    const badge = el("span", `kb-badge kb-${run.status} status status-${run.status}`, STATUS()[run.status] || run.status);
    let line = counts(run);
    if (node.dataset.compact !== undefined) {  // the admin's list: the one figure that matters, the counts on hover
      badge.title = line;
      const values = { listed: number(run.listed), failed: number(run.failed), indexed: number(run.indexed),
                       to_index: number(run.to_index) };
      line = run.status === "running" ? fmt(gettext("%(indexed)s of %(to_index)s indexed"), values)
        : fmt(run.failed ? gettext("%(listed)s files · %(failed)s failed") : gettext("%(listed)s files"), values);
    }
    node.replaceChildren(badge, " ", el("small", "", line), el("div", "kb-reason", run.reason));
    node.dataset.status = run.status;
  }

  function showLag(node, source) {
    const lag = source.index_lag;
    const values = { seconds: number(Math.round(lag.seconds)), pending: number(lag.pending), failed: number(lag.failed) };
    if (node.dataset.compact !== undefined) {  // the admin's list: the lag, its figures on hover
      node.textContent = fmt(gettext("behind %(seconds)s s"), values);
      node.title = fmt(gettext("pending %(pending)s · failed %(failed)s"), values);
      return;
    }
    node.textContent = fmt(gettext("behind %(seconds)s s · pending %(pending)s · failed %(failed)s"), values);
  }

  async function refresh() {
    let wait = IDLE_MS;
    try {
      const response = await fetch("/api/sources", { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) {
        const sources = new Map((await response.json()).map((source) => [String(source.id), source]));
        for (const node of marked("run")) {
          const source = sources.get(node.dataset.sourceRun);
          if (source) showRun(node, source);
        }
        for (const node of marked("lag")) {
          const source = sources.get(node.dataset.sourceLag);
          if (source) showLag(node, source);
        }
        if (Array.from(sources.values()).some((source) => source.last_run.status === "running")) wait = RUNNING_MS;
      } else if (response.status === 403 || response.status === 404) {
        return; // this user may not read the sources API: the page keeps what it rendered
      }
    } catch (error) {
      // offline for a moment: try again later
    }
    window.setTimeout(refresh, wait);
  }
  // The admin loads this in <head> (ModelAdmin Media): look for the marked figures once the page is parsed.
  function start() {
    if (marked("run").length || marked("lag").length) refresh();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
