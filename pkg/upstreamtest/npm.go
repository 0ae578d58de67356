package upstreamtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"testing"
)

// tarball is a built npm package and what its packument says of it.
type tarball struct {
	version   string
	file      string // the file name: <basename>-<version>.tgz
	data      []byte
	shasum    string // hex SHA-1
	integrity string // Subresource Integrity SHA-512
}

// NPM starts an npm registry for host, with a certificate from ca, that
// serves pkgs until the test ends: GET /<name> answers the packument
// (dist-tags.latest is the last version of the name given) and
// GET /<name>/-/<basename>-<version>.tgz the tarball, so that
//
//	npm install --registry <URL>/ <name>
//
// installs them. Scoped names (@scope/name) work too. Each [Package]
// becomes a tarball built here holding package/package.json and
// package/index.js, whose contents are Content. The tarball URLs in a
// packument name the host the request was sent to, so the registry works
// at URL and at DirectURL alike. NPM fails the test if it cannot build a
// tarball.
func NPM(t testing.TB, ca *CA, host string, pkgs ...Package) *Upstream {
	t.Helper()
	byName := make(map[string][]tarball)
	for _, p := range pkgs {
		tb, err := buildTarball(p)
		if err != nil {
			t.Fatal(err)
		}
		byName[p.Name] = append(byName[p.Name], tb)
	}
	return Start(t, ca, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// r.URL.Path is unescaped: a scoped packument's @scope%2fname is
		// @scope/name here, as its tarball's path spells it.
		name, file, isTarball := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/-/")
		tarballs, ok := byName[name]
		if !ok {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		if !isTarball {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(packument(name, "https://"+r.Host, tarballs))
			return
		}
		for _, tb := range tarballs {
			if tb.file == file {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Length", fmt.Sprint(len(tb.data)))
				w.Write(tb.data)
				return
			}
		}
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
	}))
}

// packument returns the registry document of name, with tarball URLs under
// base.
func packument(name, base string, tarballs []tarball) map[string]any {
	versions := make(map[string]any)
	for _, tb := range tarballs {
		versions[tb.version] = map[string]any{
			"name":    name,
			"version": tb.version,
			"main":    "index.js",
			"dist": map[string]string{
				"tarball":   base + "/" + name + "/-/" + tb.file,
				"shasum":    tb.shasum,
				"integrity": tb.integrity,
			},
		}
	}
	return map[string]any{
		"_id":       name,
		"name":      name,
		"dist-tags": map[string]string{"latest": tarballs[len(tarballs)-1].version},
		"versions":  versions,
	}
}

// buildTarball builds p's npm tarball: a gzipped tar of package/package.json
// and package/index.js.
func buildTarball(p Package) (tarball, error) {
	manifest, err := json.MarshalIndent(map[string]string{
		"name": p.Name, "version": p.Version, "main": "index.js",
	}, "", "  ")
	if err != nil {
		return tarball{}, fmt.Errorf("build tarball %s: %w", p.Name, err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, content string }{
		{"package/package.json", string(manifest) + "\n"},
		{"package/index.js", p.Content},
	} {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644,
			Size: int64(len(f.content)), ModTime: archiveTime, Format: tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return tarball{}, fmt.Errorf("build tarball %s: %w", p.Name, err)
		}
		if _, err := tw.Write([]byte(f.content)); err != nil {
			return tarball{}, fmt.Errorf("build tarball %s: %w", p.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return tarball{}, fmt.Errorf("build tarball %s: %w", p.Name, err)
	}
	if err := gz.Close(); err != nil {
		return tarball{}, fmt.Errorf("build tarball %s: %w", p.Name, err)
	}
	data := buf.Bytes()
	sha1sum, sha512sum := sha1.Sum(data), sha512.Sum512(data)
	return tarball{
		version:   p.Version,
		file:      fmt.Sprintf("%s-%s.tgz", path.Base(p.Name), p.Version),
		data:      data,
		shasum:    hex.EncodeToString(sha1sum[:]),
		integrity: "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
	}, nil
}
