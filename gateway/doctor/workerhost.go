package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/worker"
)

// Thresholds of the worker's checks.
const (
	// WorkerCertWarnUnder is how little time a worker certificate may have
	// left before the operator is told to re-enroll.
	WorkerCertWarnUnder = 14 * 24 * time.Hour
	// WorkerSkewWarn and WorkerSkewFail bound the skew between the worker
	// and the proxy: a worker behind the proxy by more than
	// grant.MaxClockSkew refuses the proxy's grants as not yet valid.
	WorkerSkewWarn = 10 * time.Second
	WorkerSkewFail = grant.MaxClockSkew
	// SpoolLagWarn is how long a finished recording may wait for upload
	// before the spool warns that uploads are stuck.
	SpoolLagWarn = 10 * time.Minute
)

// WorkerOptions are what the checks on a worker's host look at.
type WorkerOptions struct {
	// DataDir is the worker's data directory; PolicyDir its policy
	// directory (policy-persist-dir, by default DataDir/policy).
	DataDir, PolicyDir string
	// SpoolMaxBytes is the worker's recording-spool-max-bytes.
	SpoolMaxBytes int64
	// SpoolLag is the age of the oldest recording waiting for upload.
	SpoolLag time.Duration
	// APIServer, CAFile and TokenFile are the worker's --kube-api-server,
	// --kube-ca-file and --kube-token-file.
	APIServer, CAFile, TokenFile string
	// Timeout bounds each network check (0: DefaultTimeout).
	Timeout time.Duration
	// Now is this machine's clock (nil: time.Now).
	Now func() time.Time
}

// Worker runs the checks of a worker's host: its enrollment, the tunnel to
// the proxy (the worker keeps no record of its connection, so this dials
// the proxy as the worker does), the clocks, the policy bundle, the
// recording spool, the ServiceAccount token and the API server.
func Worker(ctx context.Context, o WorkerOptions) Report {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	var r Report
	if res, ok := DataDir(o.DataDir, "worker"); ok {
		r = workerDataDir(ctx, o)
	} else {
		r = append(r, res)
	}
	tok, tokResult := Token(o.TokenFile, o.Now())
	return append(r, tokResult, APIServer(ctx, o.APIServer, o.CAFile, tok, o.Timeout, o.Now))
}

// workerDataDir runs the checks that read the worker's data directory.
func workerDataDir(ctx context.Context, o WorkerOptions) Report {
	id, idResult := Identity(o.DataDir, o.Now())
	r := Report{idResult}
	if id == nil {
		r = append(r, skip("tunnel", "not dialled: no worker identity"), skip("clock", "not measured: no worker identity"))
	} else {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: id.TLSConfig(), ForceAttemptHTTP2: true}}
		pr := probe(ctx, client, "https://"+id.Proxy+"/v1/", nil, o.Timeout, o.Now)
		r = append(r, Tunnel(id, pr),
			Clock("clock", "the proxy", pr, WorkerSkewWarn, WorkerSkewFail, "the worker refuses the proxy's grants as not yet valid"))
	}
	return append(r, Policy(o.PolicyDir, "worker"), Spool(o.DataDir, o.SpoolMaxBytes, o.SpoolLag))
}

// Identity loads the worker's enrollment and judges its certificate.
func Identity(dataDir string, now time.Time) (*enroll.WorkerIdentity, Result) {
	enrollFix := "create a join token for the cluster (limen tokens create --cluster CLUSTER) and start the worker with --join-token TOKEN"
	id, err := enroll.LoadWorkerIdentity(dataDir)
	switch {
	case errors.Is(err, enroll.ErrNotEnrolled):
		return nil, fail("identity", "not enrolled: no worker identity in "+dataDir, "pass the worker's --data-dir, or "+enrollFix)
	case id != nil && !now.Before(id.NotAfter()):
		return id, fail("identity", fmt.Sprintf("the worker certificate for cluster %s expired at %s: the proxy refuses the tunnel",
			id.Cluster, stamp(id.NotAfter())), enrollFix)
	case err != nil:
		return nil, fail("identity", err.Error(), enrollFix)
	}
	found := fmt.Sprintf("enrolled for cluster %s with %s, certificate valid until %s (%s left)", id.Cluster, id.Proxy,
		stamp(id.NotAfter()), left(now, id.NotAfter()))
	if id.NotAfter().Sub(now) < WorkerCertWarnUnder {
		return id, warn("identity", found, "before it expires, "+enrollFix)
	}
	return id, ok("identity", "%s", found)
}

// Tunnel judges the dial of the proxy with the worker's certificate: the
// proxy is reachable, trusted by the CA pinned at enrollment, and accepts
// the certificate. Whether the running worker is connected now is the
// proxy's to say (limen kube ls, the limen_tunnel_workers metric).
func Tunnel(id *enroll.WorkerIdentity, pr Probe) Result {
	if pr.Err == nil {
		return ok("tunnel", "the proxy at %s is reachable, trusted, and accepts the worker certificate", id.Proxy)
	}
	pr.Addr = id.Proxy
	found, fix := connFailure("the proxy", pr, "the proxy CA pinned at enrollment")
	return fail("tunnel", found, fix)
}

// Spool judges the recording spool: full fails (new exec and attach
// sessions are refused), nearly full or a recording waiting longer than
// SpoolLagWarn warns (uploads are not getting through).
func Spool(dataDir string, maxBytes int64, lag time.Duration) Result {
	dir := worker.SpoolDir(dataDir)
	if _, err := os.Stat(dir); err != nil {
		return fail("spool", "no recording spool at "+dir, "pass the worker's --data-dir; the worker creates the spool when it starts")
	}
	u, err := recording.SpoolUsageOf(dir, maxBytes)
	if err != nil {
		return fail("spool", fmt.Sprintf("the recording spool %s cannot be measured: %v", dir, err), "check its permissions and the disk")
	}
	found := fmt.Sprintf("%s: %s, %d recordings waiting for upload", dir, use(u.Used, u.Max), u.Pending)
	switch {
	case u.Used+recording.MinMaxBytes > u.Max:
		return fail("spool", found+": FULL, new exec and attach sessions are refused",
			"get uploads through (check the tunnel and the proxy's recording store) or raise recording-spool-max-bytes")
	case bytesize.Percent(u.Used, u.Max) >= FullWarnPercent:
		return warn("spool", found+": nearly full; when full, exec and attach are refused",
			"get uploads through (check the tunnel and the proxy's recording store) or raise recording-spool-max-bytes")
	case u.Pending > 0 && lag > SpoolLagWarn:
		return warn("spool", fmt.Sprintf("%s, the oldest for %s: uploads are not getting through", found, lag.Round(time.Second)),
			"check the tunnel above and the proxy's recording store (limen doctor proxy on its host)")
	}
	return ok("spool", "%s", found)
}
