package console

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/recstore"
)

// recordingRow is one recording as the console lists it: the store's
// facts joined with its session's start and end in the audit trail.
type recordingRow struct {
	ID        string             `json:"id"`
	Cluster   string             `json:"cluster"`
	Principal identity.Principal `json:"principal"`
	Client    string             `json:"client"`
	Kind      string             `json:"kind,omitempty"`
	Target    string             `json:"target,omitempty"`
	Command   string             `json:"command,omitempty"`
	Time      time.Time          `json:"time"`
	Size      int64              `json:"size"`
	SHA256    string             `json:"sha256"`
	// ExitCode is nil when the session.end carries none (killed, cut).
	ExitCode  *int          `json:"exit_code,omitempty"`
	Duration  time.Duration `json:"duration_ns,omitempty"`
	EndReason string        `json:"end_reason,omitempty"`
}

// ExitText is the exit status as the page shows it.
func (r recordingRow) ExitText() string {
	if r.ExitCode == nil {
		return "none"
	}
	return strconv.Itoa(*r.ExitCode)
}

// errNotYours hides whether someone else's recording exists.
var errNotYours = errors.New("no such recording")

// recording joins one stored recording with its audit events. A recording
// whose session.start cannot be found has no known owner and is shown only
// to those who may see all.
func (h *Handler) recording(r *http.Request, info recstore.Info) (recordingRow, error) {
	row := recordingRow{ID: info.ID, Cluster: info.Cluster, Time: info.Time, Size: info.Size, SHA256: info.SHA256}
	start, ok, err := h.cfg.Events.SessionStart(r.Context(), info.ID)
	if err != nil {
		return row, err
	}
	if ok {
		row.Principal, row.Client = start.Principal, start.Principal.ClientID
		if start.Session != nil {
			row.Kind, row.Target, row.Command = start.Session.Login, start.Session.Target, strings.Join(start.Session.Command, " ")
		}
	}
	if row.Client == "" {
		row.Client = "kubectl"
	}
	end, ok, err := h.cfg.Events.SessionEnd(r.Context(), info.ID)
	if err != nil {
		return row, err
	}
	if ok && end.Session != nil {
		row.ExitCode, row.Duration, row.EndReason = end.Session.ExitCode, end.Session.Duration, end.Session.EndReason
	}
	return row, nil
}

// recordingFilter is the Recordings page's form.
type recordingFilter struct{ User, Cluster, Target string }

func (h *Handler) visibleRecordings(r *http.Request, s *signin, f recordingFilter) ([]recordingRow, error) {
	list, err := h.cfg.Recordings.List()
	if err != nil {
		return nil, err
	}
	all := h.may(r, s.p, ActionRecordingsAll)
	out := []recordingRow{}
	for i := len(list) - 1; i >= 0; i-- { // newest first
		info := list[i]
		if f.Cluster != "" && info.Cluster != f.Cluster {
			continue
		}
		row, err := h.recording(r, info)
		if err != nil {
			return nil, err
		}
		if !all && (row.Principal.Name == "" || !owns(s.p, row.Principal)) {
			continue
		}
		if f.User != "" && row.Principal.Name != f.User && row.Principal.String() != f.User {
			continue
		}
		if f.Target != "" && !strings.Contains(row.Target+" "+row.Command, f.Target) {
			continue
		}
		out = append(out, row)
	}
	return out, nil
}

func (h *Handler) recordingsPage(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	f := recordingFilter{User: q.Get("user"), Cluster: q.Get("cluster"), Target: q.Get("target")}
	rows, err := h.visibleRecordings(r, s, f)
	if err != nil {
		h.cfg.Logger.Error("console: list recordings", "err", err)
		h.fail(w, r, s, http.StatusServiceUnavailable, "recordings unavailable: try again later")
		return
	}
	h.render(w, r, http.StatusOK, "recordings", s, struct {
		Rows   []recordingRow
		Filter recordingFilter
		All    bool
	}{rows, f, h.may(r, s.p, ActionRecordingsAll)})
}

func (h *Handler) recordingsJSON(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	rows, err := h.visibleRecordings(r, s, recordingFilter{User: q.Get("user"), Cluster: q.Get("cluster"), Target: q.Get("target")})
	if err != nil {
		h.cfg.Logger.Error("console: list recordings", "err", err)
		h.fail(w, r, s, http.StatusServiceUnavailable, "recordings unavailable: try again later")
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

// openRecording opens recording id for s, or says it does not exist:
// someone else's recording, to one who may not see all, does not.
func (h *Handler) openRecording(r *http.Request, s *signin, id string) (io.ReadSeekCloser, recordingRow, error) {
	rc, info, err := h.cfg.Recordings.Open(id)
	if err != nil {
		return nil, recordingRow{}, err
	}
	row, err := h.recording(r, info)
	if err != nil {
		rc.Close()
		return nil, row, err
	}
	if !h.may(r, s.p, ActionRecordingsAll) && (row.Principal.Name == "" || !owns(s.p, row.Principal)) {
		rc.Close()
		h.deny(r, s.p, "console: recording "+id+" of "+row.Principal.String()+" not allowed")
		return nil, recordingRow{}, errNotYours
	}
	return rc, row, nil
}

func (h *Handler) recordingError(w http.ResponseWriter, r *http.Request, s *signin, id string, err error) {
	if errors.Is(err, recstore.ErrNotFound) || errors.Is(err, errNotYours) {
		h.fail(w, r, s, http.StatusNotFound, fmt.Sprintf("no recording %s that you may see", id))
		return
	}
	h.cfg.Logger.Error("console: open recording", "id", id, "err", err)
	h.fail(w, r, s, http.StatusServiceUnavailable, "recording unavailable: try again later")
}

func (h *Handler) recordingPage(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	rc, row, err := h.openRecording(r, s, id)
	if err != nil {
		h.recordingError(w, r, s, id, err)
		return
	}
	rc.Close()
	w.Header().Set("Content-Security-Policy", cspPlayer)
	h.render(w, r, http.StatusOK, "recording", s, struct {
		Row recordingRow
		Src string
	}{row, Prefix + "api/recordings/" + url.PathEscape(id)})
}

// recordingCast serves the recording itself, for the player and download,
// with HTTP range requests answered by range reads of the store. The store
// checks the SHA-256 of a whole read: on a mismatch the last bytes are
// withheld and the answer is cut short of its Content-Length, so a changed
// recording never plays or downloads whole. A range is served as stored
// (only the whole recording has a checksum).
//
// Every answer is audited first (recording.view, with how: play or
// download): a recording holds a session's output, and reading it is an act
// an auditor must find. When the audit trail cannot record it, nothing is
// served.
func (h *Handler) recordingCast(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	rc, row, err := h.openRecording(r, s, id)
	if err != nil {
		h.recordingError(w, r, s, id, err)
		return
	}
	defer rc.Close()
	download := r.URL.Query().Get("download") != ""
	mode := "play"
	if download {
		mode = "download"
	}
	if err := h.emit(r, audit.Event{Type: audit.TypeRecordingView, Principal: s.p, Cluster: row.Cluster, SessionID: id,
		Fields: map[string]string{"mode": mode, "owner": row.Principal.String(), "sha256": row.SHA256}}); err != nil {
		h.fail(w, r, s, http.StatusServiceUnavailable, "audit trail unavailable, so the recording cannot be shown: try again later")
		return
	}
	w.Header().Set("Content-Type", "application/x-asciicast")
	w.Header().Set("Cache-Control", "no-store")
	if download {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".cast"))
	}
	http.ServeContent(w, r, "", row.Time, &cutShort{r: rc, log: func(err error) {
		h.cfg.Logger.Error("console: recording cut short", "id", id, "err", err)
	}})
}

// cutShort logs the store's read error (a changed recording) once;
// http.ServeContent then ends the answer short of its Content-Length.
type cutShort struct {
	r   io.ReadSeeker
	log func(error)
	err error
}

func (c *cutShort) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		c.err = err
		c.log(err)
	}
	return n, err
}

func (c *cutShort) Seek(off int64, whence int) (int64, error) { return c.r.Seek(off, whence) }
