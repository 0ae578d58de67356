package sandbox

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
)

// needRoot skips a test of what a manager run as root does.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a manager that is not root runs sandboxes as itself")
	}
}

// ownerOf returns the host uid and gid of p, not following a symlink.
func ownerOf(t *testing.T, p string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// Run as root, the sandbox's root is an unprivileged host user: a
// root-only file under /etc that no mask hides stays unreadable, while
// the sandbox still sees itself as root and its files are that user's.
func TestSandboxRootIsUnprivilegedOnHost(t *testing.T) {
	needRoot(t)
	t.Parallel()
	secret := "/etc/corral-test-secret-" + strings.ToLower(rand.Text()[:8])
	if err := os.WriteFile(secret, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	d := newDriver(t, Config{})
	session := uuid.New()

	res := bash(t, d, session, "cat "+secret)
	if !res.IsError || strings.Contains(res.Output, "hunter2") || !strings.Contains(res.Output, "Permission denied") {
		t.Fatalf("cat %s: %+v; want Permission denied", secret, res)
	}
	res = bash(t, d, session, "id -u; id -g; echo made > made.txt; mkdir -p sub/dir; ln -s made.txt link")
	if res.IsError || res.Output != "0\n0\n" {
		t.Fatalf("id: %+v; want root in the sandbox", res)
	}
	ws := d.Workspace(tenant, session)
	for _, p := range []string{ws, filepath.Join(ws, "made.txt"), filepath.Join(ws, "sub", "dir"), filepath.Join(ws, "link")} {
		if uid, gid := ownerOf(t, p); uid != DefaultUser || gid != DefaultGroup {
			t.Errorf("%s belongs to %d:%d on the host, want %d:%d", p, uid, gid, DefaultUser, DefaultGroup)
		}
	}
}

// The file tools, run by the manager as root, leave what they make to the
// sandbox user, so that the sandbox can change it; and a workspace whose
// files the manager made as root (restored from a snapshot, or made by an
// older version) is handed over when its next sandbox starts, whether
// started afresh or taken from the pool.
func TestFileToolsLeaveFilesToSandbox(t *testing.T) {
	needRoot(t)
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, Config{PoolSize: pool})
			session := uuid.New()
			ws := d.Workspace(tenant, session)

			if res := run(t, d, session, &tool.WriteArgs{FilePath: "/workspace/a/b/w.txt", Content: "one\n"}); res.IsError {
				t.Fatalf("Write: %+v", res)
			}
			if res := bash(t, d, session, "echo two >> a/b/w.txt && touch a/b/new && echo three > a/e.txt"); res.IsError {
				t.Fatalf("the sandbox cannot change what Write made: %+v", res)
			}
			if res := run(t, d, session, &tool.EditArgs{FilePath: "a/e.txt", OldString: "three", NewString: "four"}); res.IsError {
				t.Fatalf("Edit: %+v", res)
			}
			if res := bash(t, d, session, "echo five >> a/e.txt && cat a/b/w.txt a/e.txt"); res.IsError || res.Output != "one\ntwo\nfour\nfive\n" {
				t.Fatalf("the sandbox after Edit: %+v", res)
			}
			if res := run(t, d, session, &tool.ReadArgs{FilePath: "a/e.txt"}); res.IsError || !strings.Contains(res.Output, "five") {
				t.Fatalf("Read: %+v", res)
			}
			for _, p := range []string{"a", "a/b", "a/b/w.txt", "a/e.txt"} {
				if uid, gid := ownerOf(t, filepath.Join(ws, p)); uid != DefaultUser || gid != DefaultGroup {
					t.Errorf("%s belongs to %d:%d, want the sandbox user", p, uid, gid)
				}
			}

			// As a snapshot restore leaves it: all the manager's.
			d.Stop(tenant, session)
			if err := os.RemoveAll(ws); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(ws, "r", "s"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "r", "s", "f"), []byte("restored\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("s/f", filepath.Join(ws, "r", "l")); err != nil {
				t.Fatal(err)
			}
			if pool > 0 {
				natstest.WaitFor(t, 10*time.Second, func() error {
					if d.Pooled() == 0 {
						return fmt.Errorf("no pooled sandbox")
					}
					return nil
				})
			}
			if res := bash(t, d, session, "echo more >> r/s/f && touch r/s/g && cat r/l"); res.IsError || res.Output != "restored\nmore\n" {
				t.Fatalf("the sandbox cannot change a restored workspace: %+v", res)
			}
			for _, p := range []string{"", "r", "r/s", "r/s/f", "r/l"} {
				if uid, gid := ownerOf(t, filepath.Join(ws, p)); uid != DefaultUser || gid != DefaultGroup {
					t.Errorf("/%s belongs to %d:%d, want the sandbox user", p, uid, gid)
				}
			}
		})
	}
}

// pidsDriver returns a driver whose sandboxes may run processes each,
// for a parallel test that runs as root, skipping it where sandboxes get
// no pids cgroup.
func pidsDriver(t *testing.T, processes int) *Driver {
	t.Helper()
	needRoot(t)
	t.Parallel()
	d := newDriver(t, Config{Processes: processes})
	if ok, why := d.ProcessesConfined(); !ok {
		t.Skipf("no pids cgroup: %v", why)
	}
	return d
}

// Every sandbox is the same host user, whose processes RLIMIT_NPROC
// counts across the machine; with a pids cgroup of its own, a sandbox's
// processes do not count against another's.
func TestProcessesNotSharedBetweenSandboxes(t *testing.T) {
	d := pidsDriver(t, 40)
	a, b := uuid.New(), uuid.New()
	var wg sync.WaitGroup
	var resA Result
	aDone := make(chan struct{})
	// 24 in each, with their shells and what they run besides: more than
	// 40 together, which one RLIMIT_NPROC for both would refuse.
	wg.Go(func() {
		defer close(aDone)
		resA = bash(t, d, a, "for i in $(seq 24); do sleep 4 & done; touch started; wait; echo a done")
	})
	natstest.WaitFor(t, 30*time.Second, func() error {
		select {
		case <-aDone:
			return fmt.Errorf("sandbox a ended before it started its processes: %+v", resA)
		default:
		}
		_, err := os.Stat(filepath.Join(d.Workspace(tenant, a), "started"))
		return err
	})
	res := bash(t, d, b, "for i in $(seq 24); do sleep 0.1 & done; wait; echo b done")
	if res.IsError || res.Output != "b done\n" {
		t.Errorf("sandbox b while a runs 24 processes: %+v", res)
	}
	wg.Wait()
	if resA.IsError || resA.Output != "a done\n" {
		t.Errorf("sandbox a: %+v", resA)
	}
}

// A sandbox's commands may run as many processes as it allows, beside
// the sandbox's own (bwrap, the executor's threads).
func TestProcessesAllowedToCommands(t *testing.T) {
	d := pidsDriver(t, 40)
	session := uuid.New()
	// The call's shell and 39 sleeps: 40.
	if res := bash(t, d, session, "for i in $(seq 39); do sleep 2 & done; wait; echo ok"); res.IsError || res.Output != "ok\n" {
		t.Errorf("40 processes of a sandbox allowed 40: %+v", res)
	}
}

// A directory on the way to the workspaces that the sandbox user could
// not search gets an ACL entry for that user alone: its mode bits, which
// everyone else goes by, are unchanged.
func TestWorkspacesReachableBySandboxUserAlone(t *testing.T) {
	needRoot(t)
	t.Parallel()
	parent := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, Config{Dir: filepath.Join(parent, "workspaces")})
	if res := bash(t, d, uuid.New(), "echo ok"); res.Output != "ok\n" {
		t.Fatalf("bash: %+v", res)
	}
	fi, err := os.Stat(parent)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("%s is %v: others may now reach it", parent, fi.Mode())
	}
	// Granted again (a restart) changes nothing.
	buf := make([]byte, 256)
	n, err := syscall.Getxattr(parent, aclXattr, buf)
	if err != nil {
		t.Fatalf("no ACL on %s: %v", parent, err)
	}
	if err := d.owner.grantSearch(d.cfg.Dir); err != nil {
		t.Fatal(err)
	}
	m, _ := syscall.Getxattr(parent, aclXattr, buf[n:])
	if string(buf[:n]) != string(buf[n:n+m]) {
		t.Errorf("ACL changed on a second grant")
	}
	acl, err := parseACL(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	want := []aclEntry{{aclUserObj, 7, aclUndefined}, {aclUser, 1, DefaultUser}, {aclGroupObj, 0, aclUndefined}, {aclMask, 1, aclUndefined}, {aclOther, 0, aclUndefined}}
	if fmt.Sprint(acl) != fmt.Sprint(want) {
		t.Errorf("ACL of %s = %v, want %v", parent, acl, want)
	}
}

// /proc/self/mountinfo shows /workspace's path from the root of its file
// system: with the workspaces on a file system of their own, as the
// README advises, that is /<tenant>/<session> and says nothing of the
// host's layout.
func TestMountinfoWithWorkspacesOnOwnFileSystem(t *testing.T) {
	needRoot(t)
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	d := newDriver(t, Config{Dir: dir})
	session := uuid.New()
	res := bash(t, d, session, "grep ' /workspace ' /proc/self/mountinfo")
	fields := strings.Fields(res.Output)
	if res.IsError || len(fields) < 5 {
		t.Fatalf("mountinfo: %+v", res)
	}
	if want := "/" + tenant + "/" + session.String(); fields[3] != want {
		t.Errorf("/workspace is %s of its file system in mountinfo, want %s", fields[3], want)
	}
	if strings.Contains(res.Output, dir) {
		t.Errorf("mountinfo shows the host path %s: %s", dir, res.Output)
	}
	if shown, err := ShownPath(dir); err != nil || shown != "/<tenant>/<session>" {
		t.Errorf("ShownPath(%s) = %q, %v; want /<tenant>/<session>", dir, shown, err)
	}
}

// ShownPath says which host path a sandbox sees in its mountinfo, as the
// sandbox itself sees it, for the sandbox-manager to warn of at start.
func TestShownPath(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	res := bash(t, d, session, "grep ' /workspace ' /proc/self/mountinfo")
	fields := strings.Fields(res.Output)
	if res.IsError || len(fields) < 5 {
		t.Fatalf("mountinfo: %+v", res)
	}
	shown, err := ShownPath(d.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("<tenant>", tenant, "<session>", session.String()).Replace(shown)
	if fields[3] != want {
		t.Errorf("ShownPath says the sandbox sees %s, it sees %s", want, fields[3])
	}
}

// A workspace made as root that is deeper than PATH_MAX (a deep tree
// restored from a snapshot) is handed to the sandbox user whole.
func TestDeepTreeIsHandedOver(t *testing.T) {
	needRoot(t)
	t.Parallel()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	const levels = 1100 // of "dddd/": 5500 bytes of path
	for range levels {
		if err := r.Mkdir("dddd", 0o755); err != nil {
			t.Fatal(err)
		}
		sub, err := r.OpenRoot("dddd")
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		r = sub
	}
	if err := r.WriteFile("f", []byte("deep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o := &owner{uid: DefaultUser, gid: DefaultGroup}
	if err := o.ownTree(dir); err != nil {
		t.Fatalf("hand over a tree %d deep: %v", levels, err)
	}
	fi, err := r.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != DefaultUser || int(st.Gid) != DefaultGroup {
		t.Errorf("the deepest file belongs to %d:%d, want %d:%d", st.Uid, st.Gid, DefaultUser, DefaultGroup)
	}
}
