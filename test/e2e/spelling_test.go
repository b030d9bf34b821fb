package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// classifyTarget is what both of Limen's hops decide for a GET of target.
func classifyTarget(t *testing.T, target string) sessions.Kind {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "https://worker/", nil)
	path, query, _ := strings.Cut(target, "?")
	r.URL.RawQuery = query
	p, err := kpath.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := reqinfo.Classify(r, p)
	if err != nil {
		t.Fatal(err)
	}
	return sessions.Classify(r, info).Kind
}

// TestStreamSpellingsAgreeWithAPIServer sends odd spellings of follow and
// watch straight to the API server and checks that sessions.Classify calls a
// request a stream exactly when the API server streams it.
func TestStreamSpellingsAgreeWithAPIServer(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	hc, err := rest.HTTPClientFor(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("follow", func(t *testing.T) {
		// The pod logs "line N" and waits for the file go.N before the next
		// line, so the test tells a followed log from a finished one by
		// what it sees: the next line, or the end of the body.
		gates := t.TempDir()
		clustertest.RunPod(t, ns, "gated", []string{"sh", "-c",
			`i=0; while :; do echo "line $i"; while [ ! -e "$0/go.$i" ]; do sleep 0.05; done; i=$((i+1)); done`, gates}, false)
		open := 0 // the log holds "line 0" … "line <open>"
		for _, q := range []string{
			"follow=true", "follow=1", "follow=True", "follow=TRUE", "follow=t", "follow=f", "follow=yes",
			"follow=", "follow", "%66ollow=true", "follow=%74rue", "follow=true&follow=false",
			"follow=0", "follow=false", "follow=FALSE", "follow=false&follow=true", "FOLLOW=true",
			"follow=true;x=1", "follow=true&sinceSeconds=abc", "follow=true&tailLines=1.5",
		} {
			target := "/api/v1/namespaces/" + ns + "/pods/gated/log?" + q
			predicted := classifyTarget(t, target) == sessions.KindLogs
			streamed, status := logFollows(t, hc, c.Server+target, open, gates, predicted)
			if predicted {
				open++ // its gate is open whatever the API server did
			}
			t.Logf("?%-30s API server: %d, followed %-5v Limen: %v", q, status, streamed, predicted)
			if streamed != predicted {
				t.Errorf("?%s: the API server followed the log: %v; sessions.Classify says a followed log: %v", q, streamed, predicted)
			}
		}
	})
	t.Run("watch", func(t *testing.T) {
		ctx := context.Background()
		// One object, so that a watch answers at once with its ADDED event.
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		list := "/api/v1/namespaces/" + ns + "/configmaps"
		for _, target := range []string{
			list + "?watch=true", list + "?watch=1", list + "?watch=True", list + "?watch=yes", list + "?watch=",
			list + "?watch", list + "?%77atch=1", list + "?watch=true&watch=false", list + "?fieldSelector=metadata.name%3Done&watch=t",
			"/api/v1/watch/namespaces/" + ns + "/configmaps", "/api/v1/watch/namespaces/" + ns + "/configmaps?watch=false",
			list + "?watch=0", list + "?watch=false", list + "?watch=FALSE", list + "?watch=false&watch=true", list + "?WATCH=true",
			list + "/one?watch=true", list + "?watch=true&limit=abc", "/api/v1/watch/namespaces/" + ns + "/configmaps?timeoutSeconds=x",
		} {
			predicted := classifyTarget(t, target) == sessions.KindWatch
			streamed, status := watchStreams(t, hc, c.Server+target)
			t.Logf("%-70s API server: %d, watch %-5v Limen: %v", strings.TrimPrefix(target, list), status, streamed, predicted)
			if streamed != predicted {
				t.Errorf("%s: the API server streamed a watch: %v; sessions.Classify says a watch: %v", target, streamed, predicted)
			}
		}
	})
}

// logFollows GETs a log of the gated pod whose last line is "line <open>"
// and reports whether the API server follows it. When open is set it opens
// the next gate and looks for the next line; otherwise it waits for the end
// of the body (a followed log has none while the pod runs).
func logFollows(t *testing.T, hc *http.Client, url string, last int, gates string, open bool) (bool, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, resp.StatusCode
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	want := fmt.Sprint("line ", last)
	for l := range lines {
		if l == want {
			break
		}
	}
	if open {
		if err := os.WriteFile(filepath.Join(gates, fmt.Sprint("go.", last)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The wait ends well before ctx, so that a body closed by ctx is never
	// taken for the API server's end of the log.
	select {
	case l, ok := <-lines:
		if ok && l != fmt.Sprint("line ", last+1) {
			t.Fatalf("%s: line %q after %q", url, l, want)
		}
		return ok, resp.StatusCode
	case <-time.After(10 * time.Second):
		return true, resp.StatusCode // still open: followed
	}
}

// watchStreams GETs url and reports whether the API server answered with
// watch events (rather than a list, an object or an error).
func watchStreams(t *testing.T, hc *http.Client, url string) (bool, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, resp.StatusCode
	}
	var first map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&first); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	_, typ := first["type"]
	_, obj := first["object"]
	return typ && obj, resp.StatusCode
}
