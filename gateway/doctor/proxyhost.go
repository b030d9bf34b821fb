package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/store"
)

// FullWarnPercent is the share of a size limit past which a store warns.
const FullWarnPercent = 80

// ProxyOptions are what the checks on the proxy's host look at.
type ProxyOptions struct {
	// DataDir is the proxy's data directory; PolicyDir its policy
	// directory (policy-persist-dir, by default DataDir/policy).
	DataDir, PolicyDir string
	// AuditMaxBytes and RecordingStoreMaxBytes are the proxy's limits.
	AuditMaxBytes, RecordingStoreMaxBytes int64
	// RecordingStore is the proxy's recording-store URL; empty or file://
	// is a directory, judged against RecordingStoreMaxBytes.
	RecordingStore string
	// Store, when set, is the proxies' shared database, where the audit
	// trail is checked instead of DataDir's file.
	Store store.Backend
}

// Proxy runs the checks of the proxy's host: the policy bundle, the audit
// database and the recording store. It only reads, beside a running proxy.
func Proxy(ctx context.Context, o ProxyOptions) Report {
	if r, ok := DataDir(o.DataDir, "proxy"); !ok {
		return Report{r}
	}
	return Report{
		Policy(o.PolicyDir, "proxy"),
		o.audit(ctx),
		recordingStoreOf(ctx, o),
	}
}

func recordingStoreOf(ctx context.Context, o ProxyOptions) Result {
	if strings.HasPrefix(o.RecordingStore, "s3://") {
		return BucketRecordingStore(ctx, o.RecordingStore)
	}
	if dir, ok := strings.CutPrefix(o.RecordingStore, "file://"); ok {
		return recordingDir(dir, o.RecordingStoreMaxBytes)
	}
	return RecordingStore(o.DataDir, o.RecordingStoreMaxBytes)
}

// BucketRecordingStore judges a recording store in a bucket: it must open
// and list with the credentials at hand. It has no limit here (the
// bucket's quota and lifecycle rules bound it).
func BucketRecordingStore(ctx context.Context, url string) Result {
	rs, err := recstore.OpenURL(ctx, url, recstore.URLOptions{ReadOnly: true})
	if err != nil {
		return fail("recordings", err.Error(), "check the bucket, the endpoint and the AWS credentials of this shell")
	}
	defer rs.Close()
	u, err := rs.Usage()
	if err != nil {
		return fail("recordings", fmt.Sprintf("the recording store %s cannot be listed: %v", rs.Location(), err), "check the credentials' s3:ListBucket right")
	}
	return ok("recordings", "%s: %s in %d recordings (bounded by the bucket's quota and lifecycle rules)", rs.Location(), bytesize.Approx(u.Used), u.Recordings)
}

// DataDir checks that dir, the data directory of who ("proxy",
// "worker"), exists: the checks that read it would each fail otherwise.
func DataDir(dir, who string) (Result, bool) {
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return fail("data dir", fmt.Sprintf("%s: %v", dir, err), "pass the "+who+"'s --data-dir (or its --config)"), false
	}
	return Result{}, true
}

// Policy judges the policy status a running proxy or worker (who) saved in
// dir: no active bundle fails (every decision is a 503), a failing bundle
// service warns (the active bundle keeps answering).
func Policy(dir, who string) Result {
	st, err := policy.ReadStatus(dir)
	if err != nil {
		return fail("policy", fmt.Sprintf("no policy status in %s (%v)", dir, err),
			fmt.Sprintf("pass the %s's --data-dir (or --policy-persist-dir); the %s writes it there once it runs", who, who))
	}
	src := st.Source
	if st.URL != "" {
		src += " " + st.URL
	}
	status := "limen policy status --policy-persist-dir " + dir + " lists the refused bundles"
	if st.Revision == "" {
		return fail("policy", fmt.Sprintf("no bundle active (%s): every request is refused with 503; last error: %s", src, st.LastError),
			"fix the bundle service or the bundle: "+status)
	}
	found := fmt.Sprintf("bundle revision %s (%s), active since %s, %d refused", st.Revision, src, stamp(st.ActivatedAt), st.Refused)
	if st.LastError != "" {
		return warn("policy", fmt.Sprintf("%s; the last fetch failed at %s: %s", found, stamp(st.LastErrorAt), st.LastError),
			"the active bundle keeps answering; fix the bundle service or the bundle: "+status)
	}
	return ok("policy", "%s", found)
}

func (o ProxyOptions) audit(ctx context.Context) Result {
	if o.Store == nil {
		return Audit(ctx, o.DataDir, o.AuditMaxBytes)
	}
	return AuditIn(ctx, o.Store, o.AuditMaxBytes)
}

// AuditIn judges the audit trail in a shared database as Audit judges the
// file: it opens and answers, and how much of its limit it uses.
func AuditIn(ctx context.Context, b store.Backend, maxBytes int64) Result {
	db, err := b.Audit(ctx, true)
	if err != nil {
		return fail("audit", fmt.Sprintf("the audit trail does not open: %v", err),
			"check the database-url, the database and its role; the proxy refuses every request while it cannot write it")
	}
	st, err := audit.New(ctx, db, audit.Options{ReadOnly: true, MaxBytes: maxBytes})
	if err != nil {
		return fail("audit", fmt.Sprintf("the audit trail in %s does not answer: %v", db.Location(), err),
			"check the database; the proxy refuses every request while it cannot write it")
	}
	defer st.Close()
	return judgeAudit(ctx, st, db.Location())
}

// Audit judges the audit database: it opens (read-only) and answers, and
// how much of its limit it uses. Full fails: the proxy then refuses every
// request.
func Audit(ctx context.Context, dataDir string, maxBytes int64) Result {
	path := audit.Path(dataDir)
	st, err := audit.Open(ctx, path, audit.Options{ReadOnly: true, MaxBytes: maxBytes})
	if errors.Is(err, fs.ErrNotExist) {
		return fail("audit", "no audit database at "+path, "pass the proxy's --data-dir; the proxy creates the database when it starts")
	}
	if err != nil {
		return fail("audit", fmt.Sprintf("the audit database %s does not open: %v", path, err),
			"check its file and directory permissions and the disk; the proxy refuses every request while it cannot write it")
	}
	defer st.Close()
	return judgeAudit(ctx, st, path)
}

// judgeAudit judges the use of an open audit store at path.
func judgeAudit(ctx context.Context, st *audit.Store, path string) Result {
	u, err := st.Usage(ctx)
	if err != nil {
		return fail("audit", fmt.Sprintf("the audit database %s does not answer: %v", path, err),
			"check the disk and the file; the proxy refuses every request while it cannot write it")
	}
	found := fmt.Sprintf("%s: %s, %d events", path, use(u.Used, u.Max), u.Events)
	fix := "delete old events or raise audit-max-bytes"
	switch pct := bytesize.Percent(u.Used, u.Max); {
	case u.Used >= u.Max:
		return fail("audit", found+": FULL, every request is refused", fix)
	case pct >= FullWarnPercent:
		return warn("audit", found+": nearly full; when full, every request is refused", fix)
	}
	return ok("audit", "%s", found)
}

// RecordingStore judges the proxy's recording store. Full fails: uploads
// are refused and recordings pile up in the workers' spools.
func RecordingStore(dataDir string, maxBytes int64) Result {
	return recordingDir(recstore.Path(dataDir), maxBytes)
}

func recordingDir(path string, maxBytes int64) Result {
	rs, err := recstore.OpenExisting(path)
	if errors.Is(err, os.ErrNotExist) {
		return ok("recordings", "%s: none yet", path)
	}
	if err != nil {
		return fail("recordings", fmt.Sprintf("the recording store %s does not open: %v", path, err), "check its permissions and the disk")
	}
	u, err := rs.Usage()
	if err != nil {
		return fail("recordings", fmt.Sprintf("the recording store %s cannot be measured: %v", path, err), "check its permissions and the disk")
	}
	found := fmt.Sprintf("%s: %s, %d recordings", path, use(u.Used, maxBytes), u.Recordings)
	fix := "delete old recordings or raise recording-store-max-bytes"
	switch pct := bytesize.Percent(u.Used, maxBytes); {
	case u.Used >= maxBytes:
		return fail("recordings", found+": FULL, uploads are refused and recordings wait in the workers' spools", fix)
	case pct >= FullWarnPercent:
		return warn("recordings", found+": nearly full; when full, uploads are refused", fix)
	}
	return ok("recordings", "%s", found)
}

// use words the use of a limit.
func use(used, limit int64) string {
	return fmt.Sprintf("%s used of %s (%d%%)", bytesize.Approx(used), bytesize.Format(limit), bytesize.Percent(used, limit))
}
