package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/logger"
	"corral.dev/services/harness"
	"corral.dev/services/memory"
	sandboxmanager "corral.dev/services/sandbox-manager"
)

func (e *env) devCmd() *cobra.Command {
	var data, listen, level, dbURL string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole platform in one process: embedded NATS, harness, sandbox-manager and memory",
		Long: `Runs an embedded NATS server with JetStream (stored under --data) and every
Corral service in this process. State is kept in --data, so a restart resumes
unfinished sessions. Memories and skills are kept in PostgreSQL when
--database-url (or DATABASE_URL) is given, and otherwise in the embedded NATS
server. Model providers are configured from the environment: OPENAI_API_KEY,
OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, CORRAL_MODEL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data == "" {
				d, err := sandboxmanager.DefaultDataDir()
				if err != nil {
					return err
				}
				data = d
			}
			return e.dev(cmd.Context(), data, listen, level, dbURL)
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "directory for Corral's state (default $XDG_STATE_HOME/corral or ~/.local/state/corral)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "HOST:PORT for the embedded NATS server")
	cmd.Flags().StringVar(&dbURL, "database-url", e.getenv("DATABASE_URL"), "PostgreSQL URL for memories and skills (DATABASE_URL; default: kept in the embedded NATS server)")
	cmd.Flags().StringVar(&level, "log-level", or(e.getenv("CORRAL_LOG_LEVEL"), "info"), "debug, info, warn or error")
	return cmd
}

func (e *env) dev(ctx context.Context, data, listen, level, dbURL string) error {
	log := logger.New(e.stderr, level, e.getenv("CORRAL_LOG_FORMAT"))
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT", listen)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--listen %q: bad port", listen)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Host: host, Port: port, StoreDir: filepath.Join(data, "nats")})
	if errors.Is(err, bus.ErrAddrInUse) {
		alt := net.JoinHostPort(host, strconv.Itoa(port+1))
		return fmt.Errorf(`%s is already in use, probably by another NATS server.
Stop that server, or run Corral on another port and point the clients at it:
    corral dev --listen %s
    export CORRAL_NATS_URL=nats://%s`, listen, alt, alt)
	}
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	getenv := func(k string) string {
		switch k {
		case "CORRAL_DATA_DIR":
			return data
		case "DATABASE_URL":
			return dbURL
		}
		return e.getenv(k)
	}
	hcfg, err := harness.LoadConfig(getenv)
	if err != nil {
		return err
	}
	scfg, err := sandboxmanager.LoadConfig(getenv)
	if err != nil {
		return err
	}
	mcfg, err := memory.LoadConfig(getenv)
	if err != nil {
		return err
	}
	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := bus.Connect("", name, log, nats.InProcessServer(srv))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	hnc, hjs, err := connect("harness")
	if err != nil {
		return err
	}
	defer hnc.Drain()
	snc, sjs, err := connect("sandbox-manager")
	if err != nil {
		return err
	}
	defer snc.Drain()
	mnc, mjs, err := connect("memory")
	if err != nil {
		return err
	}
	defer mnc.Drain()
	if err := bus.Setup(ctx, hjs); err != nil {
		return err
	}
	store, closeStore, err := memory.OpenStore(ctx, mcfg, mjs)
	if err != nil {
		return err
	}
	defer closeStore()
	mem, err := memory.New(ctx, mcfg, mjs, store, log)
	if err != nil {
		return err
	}
	h, err := harness.New(ctx, hcfg, hjs, log)
	if err != nil {
		return err
	}
	sm, err := sandboxmanager.New(ctx, scfg, sjs, log)
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.Run(gctx) })
	g.Go(func() error { return sm.Run(gctx) })
	g.Go(func() error { return mem.Run(gctx) })
	where := "the embedded store"
	if dbURL != "" {
		where = "PostgreSQL"
	}
	fmt.Fprintf(e.stderr, "Corral is running: NATS on nats://%s, state in %s, memories in %s. Ctrl-C stops it.\nTry: corral run \"list the files in /workspace\"\n", listen, data, where)
	err = g.Wait()
	log.Info("corral dev stopped")
	return err
}
