// Live progress of source runs where a page shows them (the Source admin, the library): elements marked
// data-source-run / data-source-lag with a source id are refreshed from /api/sources, every second while
// a run goes on and every 5 s otherwise. The API applies the staff rule; what it does not list stays as rendered.
"use strict";
(() => {
  const RUNNING_MS = 1000, IDLE_MS = 5000;
  const marked = (name) => Array.from(document.querySelectorAll(`[data-source-${name}]`));

  const el = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  function counts(run) {
    if (run.status === "running") {
      return `${run.step}: listed ${run.listed} · ${run.planned} changes · indexed ${run.indexed} of ${run.to_index} · failed ${run.failed}`;
    }
    return `listed ${run.listed} · unchanged ${run.unchanged} · changed ${run.changed} · new ${run.new} · ` +
      `deleted ${run.deleted} · renamed ${run.renamed} · failed ${run.failed} · chunks embedded ${run.chunks_embedded}`;
  }

  function showRun(node, source) {
    const run = source.last_run;
    if (!run.status) { node.replaceChildren("never run"); return; }
    // kb-* classes style it in the admin, status-* in the library
    node.replaceChildren(el("span", `kb-badge kb-${run.status} status status-${run.status}`, run.status), " ",
      el("small", "", counts(run)),
      el("div", "kb-reason", run.reason));
    node.dataset.status = run.status;
  }

  function showLag(node, source) {
    const lag = source.index_lag;
    node.textContent = `behind ${Math.round(lag.seconds)} s · pending ${lag.pending} · failed ${lag.failed}`;
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
