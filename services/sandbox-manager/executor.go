package sandboxmanager

import "corral.dev/services/sandbox-manager/internal/sandbox"

// RunExecutorIfRequested runs this process as a sandbox's executor and
// exits, if it was started as one, and otherwise returns at once. A live
// sandbox runs the sandbox-manager's own executable as its first process,
// which receives Bash calls over a pipe and runs them. So every binary that
// runs a [Service] must call RunExecutorIfRequested first thing in main,
// and every test binary that starts one first thing in TestMain; [New]
// fails otherwise.
func RunExecutorIfRequested() {
	sandbox.RunExecutorIfRequested()
}
