package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

var (
	// ErrNoBwrap is returned by [New] when the bwrap binary cannot be found or run.
	ErrNoBwrap = errors.New("bwrap not found: install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap, apk add bubblewrap, pacman -S bubblewrap)")
	// ErrSandboxUnavailable is returned by [New] when bwrap runs but cannot
	// create a sandbox, usually because unprivileged user namespaces are
	// disabled (sysctl kernel.unprivileged_userns_clone=0 or
	// user.max_user_namespaces=0, or a container runtime's seccomp profile).
	ErrSandboxUnavailable = errors.New("bwrap cannot create a sandbox: user namespaces are unavailable")
)

// libDirs are the top-level directories that hold programs and libraries.
// On merged-/usr systems they are symlinks into /usr and are recreated as such.
var libDirs = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// secrets are paths under /etc that the sandbox must not read even though
// /etc is visible: when the manager runs as host root, the sandbox's root
// is host root to the kernel and passes the files' permission checks. Files
// are hidden behind /dev/null, directories behind an empty read-only tmpfs.
var secrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key", "/etc/ssl/private"}

// cpuGrace is how many CPU seconds a process gets after SIGXCPU before
// SIGKILL. The hard CPU limit is this much above the soft one, so that a
// runaway command first gets SIGXCPU (exit code 152), which says what
// happened.
const cpuGrace = 5

// findBwrap resolves the bwrap binary and returns its path and version as
// (major, minor). Errors wrap [ErrNoBwrap].
func findBwrap(name string) (string, [2]int, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", [2]int{}, fmt.Errorf("%w (looked for %s: %v)", ErrNoBwrap, name, err)
	}
	cmd := exec.Command(path, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return "", [2]int{}, fmt.Errorf("%w (%s --version: %v)", ErrNoBwrap, path, err)
	}
	// The output is "bubblewrap 0.8.0".
	_, v, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	parts := strings.SplitN(v, ".", 3)
	var ver [2]int
	for i := 0; i < 2 && i < len(parts); i++ {
		ver[i], _ = strconv.Atoi(parts[i])
	}
	return path, ver, nil
}

// systemArgs returns the bwrap arguments that lay out the read-only system
// tree, as found on this host.
func systemArgs() ([]string, error) {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, dir := range libDirs {
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", dir, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(dir)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", dir, err)
			}
			args = append(args, "--symlink", target, dir)
		default:
			args = append(args, "--ro-bind-try", dir, dir)
		}
	}
	args = append(args, "--ro-bind", "/etc", "/etc")
	for _, pattern := range secrets {
		paths, _ := filepath.Glob(pattern) // the patterns are valid
		for _, p := range paths {
			fi, err := os.Lstat(p)
			switch {
			case err != nil:
			case fi.Mode().IsRegular():
				args = append(args, "--ro-bind", "/dev/null", p)
			case fi.IsDir():
				args = append(args, "--tmpfs", p, "--remount-ro", p)
			}
		}
	}
	return args, nil
}

// sandboxArgs returns the bwrap options that build a session's sandbox around
// the host directory workspace, with the host directory skills (if any)
// read-only at /skills, the host directory egress (if any) read-only at
// [egressapi.SandboxDir] with the proxy's variables (see egressArgs), an
// environment's layer (if any) at /opt/env with its variables (see
// layerArgs), and our own binary at executorPath; the caller appends
// "--" and the command, which runs as PID 1 of the sandbox.
//
// /tmp, /dev/shm and HOME ([homeDir]) are tmpfs of TmpSize bytes each and
// the rest of /dev is read-only, so what a command leaves outside
// /workspace is bounded and lives only as long as the sandbox.
func (d *Driver) sandboxArgs(workspace, skills, egress string, layer layerMount) []string {
	args := []string{
		// --unshare-all only tries a user namespace; demand one.
		"--unshare-all", "--unshare-user",
		"--die-with-parent", "--new-session", "--as-pid-1",
		"--cap-drop", "ALL",
		"--hostname", "sandbox",
		// fd 3 holds the seccomp filter (see startBox).
		"--seccomp", "3",
	}
	if d.disableUserns {
		args = append(args, "--disable-userns")
	}
	if d.owner != nil {
		// Root in the sandbox, as with a manager run as root, but the
		// sandbox user on the host (see owner.go).
		args = append(args, "--uid", "0", "--gid", "0")
	}
	args = append(args, "--clearenv")
	for _, kv := range d.env {
		args = append(args, "--setenv", kv[0], kv[1])
	}
	size := strconv.FormatInt(d.cfg.TmpSize, 10)
	args = append(args, d.system...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "01777", "--size", size, "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
		"--perms", "01777", "--size", size, "--tmpfs", "/tmp",
		// HOME's own tmpfs is made by whoever runs the commands, so it is
		// theirs: root in the sandbox, or the manager's user.
		"--dir", "/home",
		"--perms", "0700", "--size", size, "--tmpfs", homeDir,
		"--dir", "/run",
		"--ro-bind", d.exe, executorPath,
		"--bind", workspace, "/workspace",
	)
	if skills != "" {
		args = append(args, "--ro-bind", skills, "/skills")
	} else {
		args = append(args, "--dir", "/skills")
	}
	if egress != "" {
		args = append(args, egressArgs(egress)...)
	}
	args = append(args, d.layerArgs(layer)...)
	args = append(args,
		"--chdir", "/workspace",
		// The root is a tmpfs made by bwrap; without this, / would be writable.
		"--remount-ro", "/",
	)
	return args
}
