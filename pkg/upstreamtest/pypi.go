package upstreamtest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// PyPI starts a Python package index for host, with a certificate from ca,
// that serves pkgs until the test ends. It speaks the PEP 503 simple API
// in HTML: /simple/ lists the projects, /simple/<project>/ (the project's
// normalized name; others are redirected there) links each of its wheels
// with a #sha256= fragment, and /files/<wheel> serves them, so that
//
//	pip download --index-url <URL>/simple --no-deps <name>
//
// and pip install --target accept them. Each [Package] becomes a wheel
// built here, tagged py3-none-any, holding the module <name>.py (with "-"
// and "." in the name spelled "_"). It fails the test if it cannot build
// one.
func PyPI(t testing.TB, ca *CA, host string, pkgs ...Package) *Upstream {
	t.Helper()
	projects := make(map[string][]wheel)
	files := make(map[string]wheel)
	for _, p := range pkgs {
		w, err := buildWheel(p)
		if err != nil {
			t.Fatal(err)
		}
		projects[w.project] = append(projects[w.project], w)
		files[w.filename] = w
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/{$}", func(w http.ResponseWriter, r *http.Request) {
		var links strings.Builder
		for _, name := range slices.Sorted(maps.Keys(projects)) {
			fmt.Fprintf(&links, "<a href=\"/simple/%[1]s/\">%[1]s</a><br>\n", html.EscapeString(name))
		}
		writeIndex(w, "Simple index", links.String())
	})
	mux.HandleFunc("GET /simple/{project}/{$}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("project")
		if norm := pypiName(name); norm != name {
			http.Redirect(w, r, "/simple/"+norm+"/", http.StatusMovedPermanently)
			return
		}
		wheels, ok := projects[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		var links strings.Builder
		for _, wh := range wheels {
			// Relative, so the page works at URL and at DirectURL alike.
			fmt.Fprintf(&links, "<a href=\"../../files/%[1]s#sha256=%[2]s\">%[1]s</a><br>\n",
				html.EscapeString(wh.filename), wh.sha256)
		}
		writeIndex(w, "Links for "+name, links.String())
	})
	mux.HandleFunc("GET /simple/{project}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/simple/"+pypiName(r.PathValue("project"))+"/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /files/{file}", func(w http.ResponseWriter, r *http.Request) {
		wh, ok := files[r.PathValue("file")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(wh.data)))
		w.Write(wh.data)
	})
	return Start(t, ca, host, mux)
}

// writeIndex writes a PEP 503 page titled title around links.
func writeIndex(w http.ResponseWriter, title, links string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!DOCTYPE html>
<html>
<head><meta name="pypi:repository-version" content="1.0"><title>%[1]s</title></head>
<body>
<h1>%[1]s</h1>
%[2]s</body>
</html>
`, html.EscapeString(title), links)
}

// separators matches the runs that PEP 503 normalizes in project names.
var separators = regexp.MustCompile(`[-_.]+`)

// pypiName returns name normalized as PEP 503 says: lowercase, with each
// run of "-", "_" and "." replaced by "-".
func pypiName(name string) string {
	return separators.ReplaceAllString(strings.ToLower(name), "-")
}

// wheelName returns name as a wheel's file name and its module spell it:
// lowercase, with each run of "-", "_" and "." replaced by "_".
func wheelName(name string) string {
	return separators.ReplaceAllString(strings.ToLower(name), "_")
}

// archiveTime is the modification time of every file in the archives built
// here, so the same package always makes the same bytes.
var archiveTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// wheel is a built wheel and what an index says of it.
type wheel struct {
	project  string // PEP 503 normalized name
	filename string
	data     []byte
	sha256   string // hex, for the index's #sha256= fragment
}

// buildWheel builds the pure-Python wheel of p: the module <name>.py
// holding p.Content, and the dist-info pip reads (METADATA, WHEEL, and a
// RECORD with every other file's hash and size).
func buildWheel(p Package) (wheel, error) {
	dist := wheelName(p.Name)
	info := fmt.Sprintf("%s-%s.dist-info/", dist, p.Version)
	files := []struct{ name, content string }{
		{dist + ".py", p.Content},
		{info + "METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: upstreamtest package\n", p.Name, p.Version)},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: corral-upstreamtest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf, record bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, content string) error {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: archiveTime})
		if err != nil {
			return fmt.Errorf("add %s: %w", name, err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	for _, f := range files {
		if err := add(f.name, f.content); err != nil {
			return wheel{}, fmt.Errorf("build wheel %s: %w", p.Name, err)
		}
		sum := sha256.Sum256([]byte(f.content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.content))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	if err := add(info+"RECORD", record.String()); err != nil {
		return wheel{}, fmt.Errorf("build wheel %s: %w", p.Name, err)
	}
	if err := zw.Close(); err != nil {
		return wheel{}, fmt.Errorf("build wheel %s: %w", p.Name, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return wheel{
		project:  pypiName(p.Name),
		filename: fmt.Sprintf("%s-%s-py3-none-any.whl", dist, p.Version),
		data:     buf.Bytes(),
		sha256:   hex.EncodeToString(sum[:]),
	}, nil
}
