// Command corral is Corral's command-line client, and `corral dev`, which
// runs the whole platform — an embedded NATS server and every service — in
// one process.
//
//	corral dev                    # start the platform on embedded defaults
//	corral run "fix the tests"    # start a session and print its answer
//	corral logs SESSION -f        # show a session's event log, following it
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"corral.dev/pkg/envconf"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

func main() {
	sandboxmanager.RunExecutorIfRequested()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// A second signal exits at once, whatever is still shutting down.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// exitError carries a command's exit status with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	root := newRoot(getenv, stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "corral:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// env is what every command reads from its surroundings.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

func newRoot(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	e := &env{getenv: withDevCredentials(getenv), stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "corral",
		Short:         "Run AI agents with the harness outside the sandbox",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(e.devCmd(), e.runCmd(), e.logsCmd(), e.sessionsCmd(), e.memoriesCmd(), e.skillsCmd(), e.workspaceCmd(), e.policyCmd(), e.approvalsCmd(), e.decideCmd(true), e.decideCmd(false), e.stopCmd(), e.raiseCmd(), e.usageCmd(), e.setupCmd(), e.batchCmd(), e.credentialsCmd(), e.vaultsCmd(), e.environmentsCmd(), e.keygenCmd("all"))
	return root
}

// natsURL is the --nats flag's default.
func (e *env) natsURL() string { return envconf.NATSURL(e.getenv) }
