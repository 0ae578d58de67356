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
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"corral.dev/pkg/envconf"
	"corral.dev/pkg/version"
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
	os.Exit(runIn(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// exitError carries a command's exit status with its message; one with
// none exits with code having printed nothing more.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// run executes the command line args, with nothing on standard input,
// and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runIn(ctx, args, getenv, strings.NewReader(""), stdout, stderr)
}

// runIn executes the command line args with stdin and returns the exit
// status.
func runIn(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(getenv, stdout, stderr)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return ee.code // the command said all it had to
	}
	fmt.Fprintln(stderr, "corral:", err)
	switch {
	case errors.As(err, &ee):
		return ee.code
	case strings.HasPrefix(err.Error(), "unknown command "):
		// cobra's own, before any command's arguments are checked.
		return exitUsage
	}
	return exitFailed
}

// Exit statuses, as gh and kubectl use them: 0 success, exitFailed when
// the operation failed, exitUsage when the command line was wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError marks err as a mistake in the command line.
func usageError(err error) error { return &exitError{exitUsage, err} }

// checkUsage makes every command's wrong flags and arguments exit with
// exitUsage, saying which command's help to read.
func checkUsage(c *cobra.Command) {
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%w (%s --help)", err, c.CommandPath()))
	})
	if !c.Runnable() && c.HasSubCommands() {
		// cobra shows such a command's help for any argument, and
		// succeeds: a mistyped subcommand must fail.
		c.Args = func(c *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usageError(fmt.Errorf("unknown command %q for %q (%s --help lists them)", a[0], c.CommandPath(), c.CommandPath()))
			}
			return nil
		}
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	} else if args := c.Args; args != nil {
		c.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageError(fmt.Errorf("%w (usage: %s)", err, c.UseLine()))
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		checkUsage(sub)
	}
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
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("corral {{.Version}}\n")
	root.AddCommand(e.devCmd(), e.runCmd(), e.logsCmd(), e.sessionsCmd(), e.memoriesCmd(), e.skillsCmd(), e.workspaceCmd(), e.policyCmd(), e.approvalsCmd(), e.decideCmd(true), e.decideCmd(false), e.stopCmd(), e.raiseCmd(), e.usageCmd(), e.setupCmd(), e.batchCmd(), e.credentialsCmd(), e.vaultsCmd(), e.environmentsCmd(), e.webhooksCmd(), e.keygenCmd("all"))
	checkUsage(root)
	return root
}

// natsURL is the --nats flag's default.
func (e *env) natsURL() string { return envconf.NATSURL(e.getenv) }
