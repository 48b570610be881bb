// Bub console: the little the pages do in the browser. Pickers submit when changed, and the
// timeline asks for entries newer than its last (every 3 s while the page is visible), adding
// them and replacing a step's line that is drawn again.
"use strict";

document.addEventListener("change", (event) => {
  const picker = event.target.closest("[data-autosubmit]");
  if (picker && picker.form) picker.form.submit();
});

(function live() {
  const list = document.getElementById("timeline");
  if (!list || !list.dataset.live) return;
  let busy = false;
  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const url = `${list.dataset.live}&after=${list.dataset.after}&len=${list.dataset.len}`;
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.status === 205) {
        window.location.reload();
      } else if (response.status === 200) {
        const html = await response.text();
        // A step's line drawn again (its step ended) replaces the one shown while it ran.
        const fresh = document.createElement("template");
        fresh.innerHTML = html;
        for (const item of Array.from(fresh.content.children)) {
          const shown = item.classList.contains("step") && document.getElementById(item.id);
          if (shown) shown.replaceWith(item);
          else list.appendChild(item);
        }
        list.dataset.after = response.headers.get("x-after") || list.dataset.after;
        list.dataset.len = response.headers.get("x-len") || list.dataset.len;
        if (html.trim()) list.lastElementChild.scrollIntoView({ block: "end" });
      }
    } catch (_) {
      // The daemon restarting: the next poll tries again.
    } finally {
      busy = false;
    }
  }
  setInterval(poll, 3000);
})();
