package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// get writes the file at rel, or a gzipped tar of the directory at rel
// ("." for --all), to -o. A snapshot taken while it reads (the session is
// running) starts it again, up to three times, when -o is a file.
func (c *wsClient) get(ctx context.Context, stdout io.Writer, rel string) error {
	for attempt := 1; ; attempt++ {
		err := c.output(stdout, func(w io.Writer) (fs.FileMode, error) { return c.getOnce(ctx, w, rel) })
		if !changed(err) || attempt == 3 || c.o.out == "-" {
			return err
		}
	}
}

// getOnce writes what get writes, from one snapshot, and returns the mode
// the output should have: a file's own, a tar's 0644.
func (c *wsClient) getOnce(ctx context.Context, w io.Writer, rel string) (fs.FileMode, error) {
	r, err := c.list(ctx, rel, true)
	if err != nil {
		return 0, err
	}
	if rel != "." && len(r.Entries) == 1 && r.Entries[0].Path == rel {
		// A file, or a symlink, which cat follows.
		e, err := c.cat(ctx, w, rel, r.Seq)
		return e.Mode.Perm(), err
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	now := time.Now()
	for _, e := range r.Entries {
		h := &tar.Header{Name: e.Path, Mode: int64(e.Mode.Perm()), ModTime: now, Format: tar.FormatPAX}
		switch {
		case e.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		case e.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return 0, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := c.cat(ctx, tw, e.Path, r.Seq); err != nil {
				return 0, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	return 0o644, gz.Close()
}

// output runs write on -o: standard output, or a new file in -o's
// directory that takes -o's name, with the mode write returns, only once
// all is written.
func (c *wsClient) output(stdout io.Writer, write func(io.Writer) (fs.FileMode, error)) error {
	if c.o.out == "-" {
		_, err := write(stdout)
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(c.o.out), ".corral-get-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone once renamed
	mode, err := write(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), c.o.out)
}

// errNoOutput is returned by get without -o.
var errNoOutput = errors.New("get: name where to write with -o FILE (-o - for standard output)")
