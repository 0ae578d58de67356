package sandbox

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A sandbox's user namespace maps its root to the host user that started
// bwrap. Started by host root, it would be host root to the kernel: it
// would pass the permission checks of every host file it can see (the
// root-only files under /etc that no mask hides, say). So a manager that
// runs as root starts bwrap as an unprivileged host user, the sandbox
// user (Config.User and Config.Group, default 65534): root in the sandbox
// is that user on the host, and the files the sandbox makes are its.
//
// That user must then reach what bwrap binds: the workspace, the skills
// and the executor. The workspaces' directory and its ancestors grant it
// search permission (see [grantSearch]); the executor is linked or copied
// to Dir/.executor; and what the manager makes in a workspace as root (the
// workspace itself, the Write and Edit tools' files, a restored snapshot)
// is handed to the sandbox user (see [Driver.ownTree]).

// Defaults of [Config.User] and [Config.Group]: nobody and nogroup.
const (
	DefaultUser  = 65534
	DefaultGroup = 65534
)

// owner is the host user and group that sandboxes run as and own their
// workspaces' files, when the manager runs as root; nil otherwise.
type owner struct {
	uid, gid int
}

// executorName, under the workspaces' directory, is the executor the
// sandbox user can reach.
const executorName = ".executor"

// installExecutor makes exe reachable by the sandbox user as dir/.executor:
// a hard link where exe is executable by anyone, a copy otherwise (or on
// another file system). It returns the path.
func installExecutor(exe, dir string) (string, error) {
	dst := filepath.Join(dir, executorName)
	tmp := dst + ".tmp-" + strings.ToLower(rand.Text()[:10])
	fi, err := os.Stat(exe)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o001 == 0 || os.Link(exe, tmp) != nil {
		if err := copyFile(exe, tmp, 0o755); err != nil {
			os.Remove(tmp)
			return "", err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return dst, nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(perm); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// POSIX ACL xattr layout (linux/posix_acl_xattr.h).
const (
	aclVersion   = 2
	aclUserObj   = 0x01
	aclUser      = 0x02
	aclGroupObj  = 0x04
	aclGroup     = 0x08
	aclMask      = 0x10
	aclOther     = 0x20
	aclUndefined = 0xffffffff
	aclXattr     = "system.posix_acl_access"
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// grantSearch makes sure the sandbox user may search dir and each of its
// ancestors, which bwrap, run as that user, walks to bind what lies below.
// A directory whose mode bits already let it through is left alone; any
// other gets an ACL entry for that user alone, with search permission
// only (no listing): nobody else gains anything.
func (o *owner) grantSearch(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		if err := o.searchable(p); err != nil {
			return fmt.Errorf("let the sandbox user (uid %d) reach %s: %w; give it search permission on %s (chmod o+x, or setfacl -m u:%d:x), or keep the data elsewhere", o.uid, dir, err, p, o.uid)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// searchable grants the sandbox user search permission on the directory
// p, if it lacks it.
func (o *owner) searchable(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return err
	}
	buf := make([]byte, 1024)
	n, err := unix.Getxattr(p, aclXattr, buf)
	hasACL := err == nil
	if err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("read the ACL of %s: %w", p, err)
	}
	mode := st.Mode
	if !hasACL {
		switch {
		case int(st.Uid) == o.uid:
			if mode&0o100 != 0 {
				return nil
			}
		case int(st.Gid) == o.gid:
			if mode&0o010 != 0 {
				return nil
			}
		case mode&0o001 != 0:
			return nil
		}
	}
	var acl []aclEntry
	if hasACL {
		if acl, err = parseACL(buf[:n]); err != nil {
			return fmt.Errorf("read the ACL of %s: %w", p, err)
		}
	} else {
		acl = []aclEntry{
			{aclUserObj, uint16(mode>>6) & 7, aclUndefined},
			{aclGroupObj, uint16(mode>>3) & 7, aclUndefined},
			{aclOther, uint16(mode) & 7, aclUndefined},
		}
	}
	i := slices.IndexFunc(acl, func(e aclEntry) bool { return e.tag == aclUser && e.id == uint32(o.uid) })
	if i >= 0 && acl[i].perm&1 != 0 {
		return nil
	}
	if i >= 0 {
		acl[i].perm |= 1
	} else {
		acl = append(acl, aclEntry{aclUser, 1, uint32(o.uid)})
	}
	// The mask bounds the named entries and the owning group: it is their
	// union, so that the owning group keeps what it had.
	var mask uint16
	for _, e := range acl {
		if e.tag == aclUser || e.tag == aclGroupObj || e.tag == aclGroup {
			mask |= e.perm
		}
	}
	acl = slices.DeleteFunc(acl, func(e aclEntry) bool { return e.tag == aclMask })
	acl = append(acl, aclEntry{aclMask, mask, aclUndefined})
	slices.SortFunc(acl, func(a, b aclEntry) int {
		if a.tag != b.tag {
			return int(a.tag) - int(b.tag)
		}
		return int(int64(a.id) - int64(b.id))
	})
	out := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range acl {
		out = binary.LittleEndian.AppendUint16(out, e.tag)
		out = binary.LittleEndian.AppendUint16(out, e.perm)
		out = binary.LittleEndian.AppendUint32(out, e.id)
	}
	if err := unix.Setxattr(p, aclXattr, out, 0); err != nil {
		return fmt.Errorf("add an ACL entry: %w", err)
	}
	return nil
}

func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, errors.New("unknown ACL format")
	}
	var acl []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		acl = append(acl, aclEntry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])})
	}
	return acl, nil
}

// ownTree hands the workspace dir, and everything in it, to the sandbox
// user, unless dir is its already: what the manager makes there itself
// it hands over as it goes, so a workspace the sandbox user owns holds
// nothing else. One made otherwise (restored from a snapshot, or by an
// older version) is walked once. Symlinks are changed, not followed.
// Nothing runs in the workspace meanwhile: its sandbox starts after.
func (o *owner) ownTree(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if int(st.Uid) == o.uid && int(st.Gid) == o.gid {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	err = o.ownIn(root)
	root.Close()
	if err != nil {
		return fmt.Errorf("hand the workspace to the sandbox user: %w", err)
	}
	// The workspace itself last: its owner says the tree is handed over.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	return os.Lchown(dir, o.uid, o.gid)
}

// mkdirAll makes dir, slash-separated and relative to root, with its
// missing parents, each handed to o (when o is not nil).
func (o *owner) mkdirAll(root *os.Root, dir string, perm fs.FileMode) error {
	if o == nil {
		return root.MkdirAll(dir, perm)
	}
	var p string
	for part := range strings.SplitSeq(dir, "/") {
		p = path.Join(p, part)
		err := root.Mkdir(p, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := root.Lchown(p, o.uid, o.gid); err != nil {
			return err
		}
	}
	return nil
}

// chown hands the open file f to o (when o is not nil).
func (o *owner) chown(f *os.File) error {
	if o == nil {
		return nil
	}
	return f.Chown(o.uid, o.gid)
}

// makeDir makes the directory dir, whose parent exists, for a sandbox:
// owned by o, and private to it; or, without o, 0755 as the manager's.
func (o *owner) makeDir(dir string) error {
	if o == nil {
		return os.Mkdir(dir, 0o755)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return os.Lchown(dir, o.uid, o.gid)
}

// ownIn hands what the directory r holds to the sandbox user, each
// directory opened relative to its parent, so that a tree deeper than
// PATH_MAX is handed over like any other.
func (o *owner) ownIn(r *os.Root) error {
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		info, err := r.Lstat(name)
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != o.uid || int(st.Gid) != o.gid {
			if err := r.Lchown(name, o.uid, o.gid); err != nil {
				return err
			}
		}
		if !info.IsDir() {
			continue
		}
		sub, err := r.OpenRoot(name)
		if err != nil {
			return err
		}
		err = o.ownIn(sub)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
