// Plays a recording with the vendored asciinema-player.
(function () {
  "use strict";
  var el = document.getElementById("player");
  if (!el || !window.AsciinemaPlayer) { return; }
  window.AsciinemaPlayer.create(el.dataset.src, el, { fit: "width", autoPlay: true, speed: 4, idleTimeLimit: 1 });
})();
