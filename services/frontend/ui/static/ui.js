// The UI's glue around htmx: the API token (kept in this browser, sent as the API's bearer token), error
// messages, and the history download (a plain link could not carry the token).
(function () {
  "use strict";
  const KEY = "ostinato-token";
  const token = () => localStorage.getItem(KEY) || "";
  // Set while the page reloads after the token changed: a poll answered 401 in that moment must not open the
  // dialog on the page being left (what is typed there is lost with it, and the new page asks again anyway).
  let leaving = false;

  function reload() {
    leaving = true;
    location.reload();
  }

  function flash(text) {
    const box = document.getElementById("flash");
    box.textContent = text;
    box.hidden = !text;
  }

  function messageOf(xhr) {
    try { return JSON.parse(xhr.responseText).message || xhr.statusText; } catch (e) { return xhr.statusText; }
  }

  function askToken(why) {
    if (leaving) return;
    const dialog = document.getElementById("token-dialog");
    dialog.querySelector(".why").textContent = why || "";
    if (!dialog.open) dialog.showModal();
    document.getElementById("token-input").focus();
  }

  function forgetToken() {
    localStorage.removeItem(KEY);
    reload();
  }

  document.addEventListener("htmx:configRequest", (event) => {
    if (token()) event.detail.headers["Authorization"] = "Bearer " + token();
  });

  // The parts answer errors as HTML to show in place; the auth middleware answers JSON, shown here instead.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const xhr = event.detail.xhr;
    const json = (xhr.getResponseHeader("Content-Type") || "").includes("json");
    if (xhr.status === 401) {
      event.detail.shouldSwap = false;
      askToken(messageOf(xhr));
    } else if (xhr.status >= 400 && json) {
      event.detail.shouldSwap = false;
      flash(messageOf(xhr));
    } else if (xhr.status >= 400) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    } else {
      flash("");
    }
  });

  document.addEventListener("htmx:sendError", () => flash("The server did not answer; is it running?"));

  document.addEventListener("DOMContentLoaded", () => {
    const dialog = document.getElementById("token-dialog");
    dialog.addEventListener("close", () => {
      const value = document.getElementById("token-input").value.trim();
      if (dialog.returnValue === "save" && value) {
        localStorage.setItem(KEY, value);
        reload();
      }
    });
  });

  async function download(url, filename) {
    const response = await fetch(url, { headers: token() ? { Authorization: "Bearer " + token() } : {} });
    if (response.status === 401) return askToken("The download needs a token.");
    if (!response.ok) {
      let message = response.statusText;
      try { message = (await response.json()).message || message; } catch (e) { /* not JSON */ }
      return flash("The history could not be downloaded: " + message);
    }
    const link = document.createElement("a");
    link.href = URL.createObjectURL(await response.blob());
    link.download = filename;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  window.ostinato = { askToken, forgetToken, download };
})();
