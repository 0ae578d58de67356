// Package sandbox runs the model's tool calls for a session: Bash in a
// bubblewrap sandbox, and Read, Write, Edit, Glob and Grep on the session's
// workspace directory from the manager's side.
//
// Each session has a workspace, a host directory Dir/<tenant>/<session> that
// the sandbox sees as /workspace, its only writable tree. A Bash call is one
// bwrap invocation with new user, PID, mount, IPC, UTS and network namespaces
// (no network at all), a read-only view of /usr, /etc and the library
// directories, a private /proc, /dev and /tmp, an empty environment apart from
// a few fixed variables, and resource limits set with ulimit before the
// command runs. Nothing else of the host is visible: not /root, /home, /var,
// the data directory or other sessions' workspaces.
//
// The file tools never enter the sandbox: they open the workspace with
// [os.Root], which refuses any path or symlink that leads outside it.
//
// Calls of one session run one at a time; calls of different sessions run
// concurrently.
package sandbox
