package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Image is an image read back from a layout, its one layer unpacked.
type Image struct {
	Ref      string   // the tag of index.json
	Manifest Manifest //
	Config   Config   //
	Root     string   // the unpacked root filesystem
	Files    []string // every path in the layer, without the leading /
}

// Unpack reads the single image of the layout in dir as a runtime would —
// index, manifest, config, layer, each checked against its digest — and
// unpacks its layer into root.
func Unpack(dir, root string) (*Image, error) {
	var idx Index
	if err := readJSON(filepath.Join(dir, "index.json"), "", &idx); err != nil {
		return nil, err
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != mediaManifest {
		return nil, fmt.Errorf("index.json: want one image manifest, have %+v", idx.Manifests)
	}
	img := &Image{Root: root, Ref: idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"]}
	if err := readBlob(dir, idx.Manifests[0], &img.Manifest); err != nil {
		return nil, err
	}
	if err := readBlob(dir, img.Manifest.Config, &img.Config); err != nil {
		return nil, err
	}
	if len(img.Manifest.Layers) != len(img.Config.RootFS.DiffIDs) {
		return nil, fmt.Errorf("manifest has %d layers, config %d diff_ids", len(img.Manifest.Layers), len(img.Config.RootFS.DiffIDs))
	}
	for i, l := range img.Manifest.Layers {
		b, err := blob(dir, l)
		if err != nil {
			return nil, err
		}
		files, err := untar(b, root, img.Config.RootFS.DiffIDs[i])
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		img.Files = append(img.Files, files...)
	}
	return img, nil
}

func blob(dir string, d Descriptor) ([]byte, error) {
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexSum) != 64 {
		return nil, fmt.Errorf("digest %q: want sha256:<64 hex>", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexSum))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexSum || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s: content does not match its digest or size", d.Digest)
	}
	return b, nil
}

func readBlob(dir string, d Descriptor, v any) error {
	b, err := blob(dir, d)
	if err != nil {
		return err
	}
	return readJSON("", string(b), v)
}

func readJSON(file, text string, v any) error {
	b := []byte(text)
	if file != "" {
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// untar unpacks a gzipped layer whose tar has digest diffID into root.
func untar(gz []byte, root, diffID string) ([]string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	var files []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		name := path.Clean(hdr.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("entry %q leaves the root", hdr.Name)
		}
		files = append(files, name)
		dst := filepath.Join(root, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&0o777)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("entry %q: type %q is not a file or directory", hdr.Name, hdr.Typeflag)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return nil, fmt.Errorf("tar digest %s, config says %s", got, diffID)
	}
	return files, nil
}

// Build compiles cmd/limen of the module at repoRoot as the image ships it
// (static, CGO_ENABLED=0, trimmed paths) and writes the layout to dir. It
// is what make image does, for tests.
func Build(repoRoot, dir, ref, version string) error {
	bin := filepath.Join(dir+".build", "limen")
	cmd := goBuild(repoRoot, bin, version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %w\n%s", cmd.Args, err, out)
	}
	defer os.RemoveAll(filepath.Dir(bin))
	certs := "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(certs); err != nil {
		certs = ""
	}
	_, err := Write(dir, Options{Binary: bin, CACerts: certs, Arch: goarch(), Ref: ref, Version: version})
	return err
}
