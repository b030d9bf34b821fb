// Command image writes Limen's container image as an OCI image layout
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// without a container daemon: one layer holding the static limen binary,
// the nonroot user, CA roots and /tmp — what the Dockerfile's distroless
// stage holds, and no shell. `make image` runs it; push the layout with
// `crane push bin/limen-oci REF` or `skopeo copy oci:bin/limen-oci docker://REF`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/limenhq/limen/deploy/image/oci"
)

func main() {
	var o oci.Options
	out := flag.String("out", "", "directory to write the OCI layout to (replaced)")
	flag.StringVar(&o.Binary, "binary", "", "static linux limen binary (CGO_ENABLED=0)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to ship; empty ships none")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH the binary was built for")
	flag.StringVar(&o.Ref, "ref", "", "tag recorded in index.json (org.opencontainers.image.ref.name)")
	flag.StringVar(&o.Version, "version", "dev", "version label")
	check := flag.Bool("check", false, "then read the layout back, unpack its layer and run the entrypoint with version")
	flag.Parse()
	if *out == "" || o.Binary == "" {
		fmt.Fprintln(os.Stderr, "image: -out and -binary are required (see make image)")
		os.Exit(2)
	}
	// SOURCE_DATE_EPOCH makes the image reproducible; unset, the epoch.
	o.Created = time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH %q: want seconds since 1970\n", s)
			os.Exit(2)
		}
		o.Created = time.Unix(n, 0)
	}
	if err := os.RemoveAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	digest, err := oci.Write(*out, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("OCI layout %s: %s (%s)\n", *out, digest, o.Ref)
	if *check {
		if err := checkImage(*out); err != nil {
			fmt.Fprintln(os.Stderr, "image check:", err)
			os.Exit(1)
		}
	}
}

// checkImage unpacks the layout's layer as a runtime would and runs its
// entrypoint with "version", as the image would start.
func checkImage(dir string) error {
	root, err := os.MkdirTemp("", "limen-image-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	img, err := oci.Unpack(dir, root)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(root, img.Config.Config.Entrypoint[0]), "version")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s version: %w\n%s", img.Config.Config.Entrypoint[0], err, out)
	}
	fmt.Printf("image check: %s version, user %s, layer %d bytes:\n%s", img.Config.Config.Entrypoint[0],
		img.Config.Config.User, img.Manifest.Layers[0].Size, out)
	return nil
}
