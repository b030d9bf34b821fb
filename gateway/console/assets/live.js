// The live view: output of a running exec or attach, read-only. The socket
// only ever receives; nothing typed here reaches the session.
(function () {
  "use strict";
  var out = document.getElementById("live-output");
  var status = document.getElementById("live-status");
  var replay = document.getElementById("live-replay");
  if (!out) { return; }
  // Terminal control sequences (colours, cursor moves) are dropped: the
  // view shows text; the recording's player renders the terminal.
  var csi = /\x1b\[[0-?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]|\r(?!\n)/g;
  var url = new URL(out.dataset.socket, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  var ws = new WebSocket(url.href);
  var ended = false;
  ws.onopen = function () { status.textContent = "Live: output appears as it happens."; };
  ws.onmessage = function (e) {
    var m = JSON.parse(e.data);
    if (m.o) {
      out.textContent += m.o.replace(csi, "");
      out.scrollTop = out.scrollHeight;
    }
    if (m.x) { status.textContent = "The command exited: " + m.x; }
    if (m.end) {
      ended = true;
      status.textContent = "The session ended (" + m.end + ").";
      out.dataset.ended = m.end;
      replay.hidden = false;
    }
  };
  ws.onclose = function () {
    if (!ended) { status.textContent = "The live view closed."; }
  };
})();
