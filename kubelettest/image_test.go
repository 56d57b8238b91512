package kubelettest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// imageFile is a host file copied into an image's only layer, with its
// mode; its parent directories are made, mode 0755.
type imageFile struct{ src, dst string }

// writeImage writes an OCI image layout archive, which `ctr images import`
// loads under name: one uncompressed layer holding files, and a config
// with entrypoint.
func writeImage(out, name string, files []imageFile, entrypoint []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		info, err := os.Stat(f.src)
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		var parents []string
		for d := filepath.Dir(f.dst); d != "." && !dirs[d]; d = filepath.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Name: parents[i] + "/", Mode: 0o755, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		hdr := &tar.Header{Name: f.dst, Mode: int64(info.Mode().Perm()), Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	manifestDesc.Annotations = map[string]string{"io.containerd.image.name": name}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []ociDescriptor{manifestDesc}})
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	ow := tar.NewWriter(f)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	}
	for _, e := range entries {
		if err := ow.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := ow.Write(e.data); err != nil {
			return err
		}
	}
	if err := ow.Close(); err != nil {
		return err
	}
	return f.Close()
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func descriptor(mediaType string, data []byte) ociDescriptor {
	sum := sha256.Sum256(data)
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
}

func blobPath(d ociDescriptor) string {
	return filepath.Join("blobs", "sha256", d.Digest[len("sha256:"):])
}
