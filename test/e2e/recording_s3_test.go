package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/worker"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/s3server"
)

// s3OutageEnv shortens (or lengthens) the store's outage in
// TestRecordingsInS3; the default is the minute of issue #29.
const s3OutageEnv = "LIMEN_E2E_S3_OUTAGE"

// TestRecordingsInS3: with --recording-store s3://… the recordings of real
// kubectl execs through Limen are stored as objects in a real S3 server
// (versitygw, built from the Go module proxy and cached), play with limen
// play and in the console's player, download from the console (whole, and
// by range), and survive the
// store's outage: the execs done while it is down wait in the worker's
// spool and are all stored, unchanged, once it is back. A wrong secret key
// or bucket stops the proxy at start, naming the key.
func TestRecordingsInS3(t *testing.T) {
	outage := time.Minute
	if v := os.Getenv(s3OutageEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", s3OutageEnv, v, err)
		}
		outage = d
	}
	ctx := context.Background()
	const bucket = "limen-recordings"
	srv, err := s3server.Start(ctx, t.TempDir(), os.Stderr, bucket)
	if err != nil {
		t.Fatalf("start the S3 server: %v", err)
	}
	t.Cleanup(srv.Close)
	for _, kv := range s3server.Env() { // the proxy and limen play inherit them
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	storeURL := srv.URL(bucket)

	t.Run("a wrong secret key or bucket stops the proxy at start", func(t *testing.T) {
		shared := gateway(t)
		for name, c := range map[string]struct{ url, secret, want string }{
			"wrong secret key": {storeURL, "not-the-secret", "credentials"},
			"no such bucket":   {srv.URL("no-such-bucket"), s3server.SecretKey, "does not exist"},
		} {
			cmd := exec.Command(shared.Bin, "proxy", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--recording-store", c.url)
			cmd.Env = append(os.Environ(), "AWS_SECRET_ACCESS_KEY="+c.secret)
			out, err := runFor(cmd, time.Minute)
			if err == nil || !strings.Contains(out, "recording-store") || !strings.Contains(out, c.want) {
				t.Errorf("%s: the proxy %v, said %q; want it to refuse to start naming recording-store and %q", name, err, out, c.want)
			}
			if strings.Contains(out, "Limen proxy listening") {
				t.Errorf("%s: the proxy listened", name)
			}
		}
	})

	e := extraGateway(t, "recordings in S3", gatewaytest.Options{ProxyArgs: []string{"--recording-store", storeURL}})
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "s3-pod", []string{"sleep", "3600"}, false)
	kc := login(t, e, "alice")
	execMarker := func(marker string) {
		t.Helper()
		out, stderr, code := kubectl(t, kc, "", "-n", ns, "exec", "s3-pod", "--", "sh", "-c",
			"echo "+marker+"; i=0; while [ $i -lt 200 ]; do echo "+marker+"-line-$i; i=$((i+1)); done")
		if code != 0 || !strings.Contains(out, marker+"-line-199") {
			t.Fatalf("kubectl exec %s: exit %d, stderr %q", marker, code, stderr)
		}
	}

	var first sessionRecording
	t.Run("an exec's recording is an object in the S3 server", func(t *testing.T) {
		execMarker("s3-first")
		first = waitSessionEnds(t, e, 1)[0]
		waitObjects(t, srv, bucket, []sessionRecording{first}, 2*time.Minute)
		if _, err := os.Stat(filepath.Join(recstore.Path(e.ProxyDataDir()), gatewaytest.ClusterName)); !os.IsNotExist(err) {
			t.Errorf("the proxy's data directory holds recordings too (%v)", err)
		}
	})

	t.Run("limen play reads it from the bucket", func(t *testing.T) {
		out, err := e.Limen(ctx, "", "", "play", first.id, "--recording-store", storeURL, "--speed", "1000", "--max-idle", "1ms")
		if err != nil || !strings.Contains(out, "s3-first-line-199") {
			t.Fatalf("limen play: %v\n%.500q", err, out)
		}
		status, err := e.Limen(ctx, "", "", "proxy", "status", "--data-dir", e.ProxyDataDir(), "--recording-store", storeURL)
		if err != nil || !strings.Contains(status, "Recording store: s3://"+bucket) || !strings.Contains(status, "oldest kept: ") || !strings.Contains(status, first.id) {
			t.Fatalf("limen proxy status: %v\n%s", err, status)
		}
	})

	t.Run("the console plays it and downloads it, whole and by range", func(t *testing.T) {
		want, err := os.ReadFile(srv.Path(bucket, first.object()))
		if err != nil {
			t.Fatal(err)
		}
		base := "https://" + e.ProxyAddr
		admin := consoleBrowser(t)
		signIn(t, admin, base, "admin", password("admin"))
		got := eval[string](t, admin, fmt.Sprintf(`fetch('/console/api/recordings/%s?download=1').then(r => r.text())`, first.id))
		if got != string(want) {
			t.Fatalf("the console's download is %d bytes, the object %d", len(got), len(want))
		}
		part := eval[string](t, admin, fmt.Sprintf(`fetch('/console/api/recordings/%s', {headers: {Range: 'bytes=10-29'}}).then(r => r.status + ' ' + r.headers.get('Content-Range'))`, first.id))
		if !strings.HasPrefix(part, fmt.Sprintf("206 bytes 10-29/%d", len(want))) {
			t.Errorf("a range request: %q", part)
		}
		body := eval[string](t, admin, fmt.Sprintf(`fetch('/console/api/recordings/%s', {headers: {Range: 'bytes=10-29'}}).then(r => r.text())`, first.id))
		if body != string(want[10:30]) {
			t.Errorf("the range's bytes %q, want %q", body, want[10:30])
		}
		run(t, admin, "open the recording", chromedp.Navigate(base+"/console/recordings/"+first.id), chromedp.WaitVisible("#player", css("#player")))
		// What the player rendered on its terminal, read from the bucket.
		deadline := time.Now().Add(20 * time.Second)
		var shown string
		for time.Now().Before(deadline) {
			shown = eval[string](t, admin, `(document.querySelector('#player .ap-term') || {}).textContent || ''`)
			if strings.Contains(shown, "s3-first-line-") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !strings.Contains(shown, "s3-first-line-") {
			t.Fatalf("the console's player rendered none of the recording: %q\n(page: %q)", shown, text(t, admin, "main"))
		}
	})

	t.Run("the store down for a while: the spool holds the recordings, none is lost", func(t *testing.T) {
		srv.Stop()
		start := time.Now()
		markers := []string{"s3-outage-1", "s3-outage-2", "s3-outage-3"}
		for _, m := range markers {
			execMarker(m)
		}
		ends := waitSessionEnds(t, e, 1+len(markers))[1:]
		spool := worker.SpoolDir(e.WorkerDataDir())
		for time.Since(start) < outage {
			u, err := recording.SpoolUsageOf(spool, 10<<30)
			if err != nil {
				t.Fatal(err)
			}
			if u.Pending != len(markers) {
				t.Fatalf("during the outage the worker's spool holds %d recordings, want %d", u.Pending, len(markers))
			}
			time.Sleep(time.Second)
		}
		t.Logf("the store was down for %s", time.Since(start).Round(time.Second))
		if b, _ := os.ReadFile(filepath.Join(e.Dir, "worker.log")); !strings.Contains(string(b), "recording upload failed; will retry") {
			t.Errorf("the worker did not retry the uploads during the outage")
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		waitObjects(t, srv, bucket, append([]sessionRecording{first}, ends...), 2*time.Minute)
		t.Logf("all recordings stored %s after the store came back", time.Since(back).Round(100*time.Millisecond))
		for i, r := range ends {
			out, err := e.Limen(ctx, "", "", "play", r.id, "--recording-store", storeURL, "--speed", "1000", "--max-idle", "1ms")
			if err != nil || !strings.Contains(out, markers[i]+"-line-199") {
				t.Errorf("limen play %s (%s): %v\n%.300q", r.id, markers[i], err, out)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			u, err := recording.SpoolUsageOf(spool, 10<<30)
			if err == nil && u.Pending == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the spool still holds %+v (%v) after the uploads", u, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// sessionRecording is a session's recording as its session.end names it.
type sessionRecording struct{ id, sum string }

func (r sessionRecording) object() string {
	return gatewaytest.ClusterName + "/" + r.id + "/" + r.sum + ".cast"
}

// waitSessionEnds waits until e's audit trail holds n recorded exec
// session.end events and returns them, oldest first.
func waitSessionEnds(t *testing.T, e *gatewaytest.Env, n int) []sessionRecording {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := audit.Open(context.Background(), audit.Path(e.ProxyDataDir()), audit.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("open audit store: %v", err)
		}
		evs, err := st.Search(context.Background(), audit.Query{Type: audit.TypeSessionEnd})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		var out []sessionRecording
		for _, ev := range evs {
			if ev.Session != nil && ev.Session.RecordingSHA256 != "" {
				out = append(out, sessionRecording{ev.SessionID, ev.Session.RecordingSHA256})
			}
		}
		if len(out) >= n {
			return out // Search answers oldest first
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d recorded session.end events, want %d", len(out), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitObjects waits until the S3 server keeps exactly the objects of want
// in bucket.
func waitObjects(t *testing.T, srv *s3server.Server, bucket string, want []sessionRecording, d time.Duration) {
	t.Helper()
	var keys []string
	for _, r := range want {
		keys = append(keys, r.object())
	}
	slices.Sort(keys)
	deadline := time.Now().Add(d)
	for {
		got, err := srv.Objects(bucket)
		slices.Sort(got)
		if err == nil && slices.Equal(got, keys) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the S3 server holds %v (%v), want %v", got, err, keys)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runFor runs cmd, killing it after d, and returns what it printed.
func runFor(cmd *exec.Cmd, d time.Duration) (string, error) {
	timer := time.AfterFunc(d, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
