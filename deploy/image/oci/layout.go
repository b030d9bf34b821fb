// Package oci writes and reads Limen's container image as an OCI image layout,
// without a container daemon (deploy/image; make image).
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The image's layout on disk, the same as the Dockerfile's distroless
// stage: the binary, a passwd and group naming the nonroot user, the CA
// roots (for OIDC and bundle services over https), and a sticky /tmp.
const (
	Entrypoint = "/usr/local/bin/limen"
	User       = "65532:65532"
	DataDir    = "/var/lib/limen"
)

// Media types of the OCI image spec (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the OS and architecture of a manifest.
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

// Index is index.json of an OCI layout.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is an image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is the image configuration.
type Config struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       RunConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// RunConfig is how a runtime starts the image.
type RunConfig struct {
	User       string            `json:"User"`
	Entrypoint []string          `json:"Entrypoint"`
	Env        []string          `json:"Env"`
	WorkingDir string            `json:"WorkingDir"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Options are what goes into the image.
type Options struct {
	Binary  string // a static linux limen binary
	CACerts string // a CA bundle to ship as /etc/ssl/certs/ca-certificates.crt; "" ships none
	Arch    string // GOARCH of Binary
	Ref     string // the tag, for org.opencontainers.image.ref.name
	Version string
	Created time.Time // every timestamp in the image, for reproducible builds
}

// Write writes an OCI image layout with one single-layer image to dir, and
// returns the manifest's digest.
func Write(dir string, o Options) (string, error) {
	layer, diffID, err := buildLayer(o)
	if err != nil {
		return "", err
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", err
	}
	put := func(mediaType string, b []byte) (Descriptor, error) {
		sum := sha256.Sum256(b)
		d := Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
		return d, os.WriteFile(filepath.Join(blobs, hex.EncodeToString(sum[:])), b, 0o644)
	}
	layerDesc, err := put(mediaLayer, layer)
	if err != nil {
		return "", err
	}
	cfg := Config{Created: o.Created.UTC().Format(time.RFC3339), Architecture: o.Arch, OS: "linux",
		Config: RunConfig{
			User: User, Entrypoint: []string{Entrypoint}, WorkingDir: "/",
			Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			Labels: map[string]string{
				"org.opencontainers.image.title":   "limen",
				"org.opencontainers.image.version": o.Version,
				"org.opencontainers.image.source":  "https://github.com/limenhq/limen",
			},
		}}
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{diffID}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgDesc, err := put(mediaConfig, cb)
	if err != nil {
		return "", err
	}
	mb, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: cfgDesc, Layers: []Descriptor{layerDesc}})
	if err != nil {
		return "", err
	}
	manDesc, err := put(mediaManifest, mb)
	if err != nil {
		return "", err
	}
	manDesc.Platform = &Platform{OS: "linux", Architecture: o.Arch}
	if o.Ref != "" {
		manDesc.Annotations = map[string]string{"org.opencontainers.image.ref.name": o.Ref}
	}
	ib, err := json.MarshalIndent(Index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []Descriptor{manDesc}}, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), ib, 0o644); err != nil {
		return "", err
	}
	return manDesc.Digest, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// buildLayer returns the gzipped layer and the digest of its tar (the
// config's diff_id).
func buildLayer(o Options) (gz []byte, diffID string, err error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, "", fmt.Errorf("binary: %w", err)
	}
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	hdr := func(name string, mode int64, typ byte, size int64, uid int) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Typeflag: typ, Size: size, Uid: uid, Gid: uid,
			ModTime: o.Created, Format: tar.FormatPAX}
	}
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(hdr(name+"/", mode, tar.TypeDir, 0, uid))
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(hdr(name, mode, tar.TypeReg, int64(len(b)), 0)); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, 65532) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(Entrypoint[1:], 0o755, bin) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/lib", 0o755, 0) },
		func() error { return dir(DataDir[1:], 0o700, 65532) },
	}
	if o.CACerts != "" {
		certs, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, "", fmt.Errorf("CA bundle: %w", err)
		}
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, certs) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return out.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}
