package upload

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// tarTree reads the tar archive at name, gzipped when gz is set. A tar
// archive is read in one pass: each file's content is spooled to a
// temporary directory, once per content, to be sent from there.
func tarTree(name string, gz bool) (_ *tree, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	}
	sp, err := newSpool()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sp.remove()
		}
	}()
	var entries []Entry
	byPath := make(map[string]int) // index in entries, for hard links
	var bytes int64
	var special []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p, err := archivePath(name, hdr.Name)
		if err != nil {
			return nil, err
		}
		if p == "" || hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		e := Entry{Path: p, Mode: fs.FileMode(hdr.Mode).Perm()}
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.Mode |= fs.ModeDir
		case tar.TypeReg:
			if e.Hash, e.Size, err = sp.add(tr); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, err)
			}
			bytes += e.Size
		case tar.TypeSymlink:
			e.Mode, e.Link = fs.ModeSymlink|0o777, hdr.Linkname
		case tar.TypeLink:
			// A hard link: a file of the same content as one before it.
			target, err := archivePath(name, hdr.Linkname)
			i, ok := byPath[target]
			if err != nil || !ok || entries[i].Mode.Type() != 0 {
				return nil, fmt.Errorf("%s: %s is a hard link to %q, which is not a file before it", name, p, hdr.Linkname)
			}
			e.Size, e.Hash = entries[i].Size, entries[i].Hash
			bytes += e.Size
		default:
			special = append(special, fmt.Sprintf("%s (type %q)", p, hdr.Typeflag))
			continue
		}
		byPath[p] = len(entries)
		entries = append(entries, e)
		if err := overBounds(name, len(entries), bytes); err != nil {
			return nil, err
		}
	}
	if len(special) > 0 {
		return nil, specialError(name, special)
	}
	if entries, err = sortAndFill(name, entries); err != nil {
		return nil, err
	}
	return &tree{list: List{Files: entries}, open: sp.open, close: sp.remove}, nil
}

// spool keeps the contents read from an archive, in a temporary
// directory, one file per content named by its hash.
type spool struct{ dir string }

func newSpool() (*spool, error) {
	dir, err := os.MkdirTemp("", "corral-upload-*")
	if err != nil {
		return nil, err
	}
	return &spool{dir: dir}, nil
}

// add keeps r's content and returns its hash and size.
func (s *spool) add(r io.Reader) (string, int64, error) {
	f, err := os.CreateTemp(s.dir, "part-*")
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, err
	}
	hash := hex.EncodeToString(h.Sum(nil))
	return hash, n, os.Rename(f.Name(), filepath.Join(s.dir, hash))
}

func (s *spool) open(e Entry) (io.ReadCloser, error) {
	return os.Open(filepath.Join(s.dir, e.Hash))
}

func (s *spool) remove() error { return os.RemoveAll(s.dir) }

// zipTree reads the zip archive at name, whose files are read again from
// it when they are sent. A symlink is an entry of that mode whose content
// is its target.
func zipTree(name string) (_ *tree, err error) {
	zr, err := zip.OpenReader(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if err != nil {
			zr.Close()
		}
	}()
	var entries []Entry
	files := make(map[string]*zip.File)
	var bytes int64
	var special []string
	for _, f := range zr.File {
		p, err := archivePath(name, f.Name)
		if err != nil {
			return nil, err
		}
		if p == "" {
			continue
		}
		mode := f.Mode()
		e := Entry{Path: p, Mode: mode.Perm()}
		switch t := mode.Type(); {
		case t == fs.ModeDir || f.Name[len(f.Name)-1] == '/':
			e.Mode |= fs.ModeDir
		case t == 0:
			if e.Hash, e.Size, err = hashZipFile(f); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, err)
			}
			files[p] = f
			bytes += e.Size
		case t == fs.ModeSymlink:
			if e.Link, err = zipLink(f); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, err)
			}
			e.Mode = fs.ModeSymlink | 0o777
		default:
			special = append(special, fmt.Sprintf("%s (%s)", p, kind(t)))
			continue
		}
		entries = append(entries, e)
		if err := overBounds(name, len(entries), bytes); err != nil {
			return nil, err
		}
	}
	if len(special) > 0 {
		return nil, specialError(name, special)
	}
	if entries, err = sortAndFill(name, entries); err != nil {
		return nil, err
	}
	return &tree{
		list:  List{Files: entries},
		open:  func(e Entry) (io.ReadCloser, error) { return files[e.Path].Open() },
		close: zr.Close,
	}, nil
}

// hashZipFile reads f (checking its CRC-32) and returns its hash and
// size.
func hashZipFile(f *zip.File) (string, int64, error) {
	r, err := f.Open()
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// zipLink reads a symlink's target, the content of its entry.
func zipLink(f *zip.File) (string, error) {
	r, err := f.Open()
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxPath+1))
	if err != nil {
		return "", err
	}
	if len(b) == 0 || len(b) > maxPath {
		return "", errors.New("a symlink with no target, or one too long")
	}
	return string(b), nil
}
