package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrAddrInUse is returned by [StartServer] when its listen address is taken.
var ErrAddrInUse = errors.New("address already in use")

// ServerConfig configures an embedded NATS server.
type ServerConfig struct {
	// Host and Port to listen on; Port -1 picks a free port.
	Host string
	Port int
	// StoreDir is where JetStream keeps its files.
	StoreDir string
	// Name is the server's name (default "corral").
	Name string
	// ConfigFile, when set, is a nats-server config file applied first:
	// who may sign in and do what (see credential.NATSConfig).
	ConfigFile string
	// Logger receives the server's log; nil keeps the server quiet.
	Logger *slog.Logger
}

// StartServer starts an embedded NATS server with JetStream on file storage
// and waits until it accepts connections. The caller shuts it down with
// Shutdown and WaitForShutdown. A taken address returns an error wrapping
// [ErrAddrInUse].
func StartServer(cfg ServerConfig) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("read nats config %s: %w", cfg.ConfigFile, err)
		}
	}
	opts.Host, opts.Port = cfg.Host, cfg.Port
	opts.ServerName = cfg.Name
	if opts.ServerName == "" {
		opts.ServerName = "corral"
	}
	opts.JetStream = true
	opts.StoreDir = cfg.StoreDir
	opts.NoSigs = true
	opts.NoLog = cfg.Logger == nil
	opts.MaxPayload = 8 << 20

	if cfg.Port > 0 {
		// The server would only log a taken port; find out first, so the
		// caller can say what to do about it.
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w: %v", addr, ErrAddrInUse, err)
		}
		ln.Close()
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("new nats server: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(slogAdapter{cfg.Logger}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("nats server not ready after 10s")
	}
	return s, nil
}

// Connect connects to the NATS server at url as the named client,
// reconnecting forever once connected, and logging disconnects. A publish
// or subscription the server's permissions refuse is logged as an error:
// a service's permissions must cover all it does, and a refused request
// otherwise shows only as a time-out.
func Connect(url, name string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				log.Error("nats refused", "err", err)
				refused(nc, err)
				return
			}
			log.Warn("nats error", "err", err)
		}),
		nats.Name(name),
		nats.ClosedHandler(func(nc *nats.Conn) { refusalWatches.Delete(nc) }),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  {}

// UserFromEnv returns an option signing in as CORRAL_NATS_USER with
// CORRAL_NATS_PASSWORD, when they are set: each service has its own user
// and permissions in deploy/nats.conf, and each client its credential.
func UserFromEnv(getenv func(string) string) nats.Option {
	return SignIn(getenv("CORRAL_NATS_USER"), getenv("CORRAL_NATS_PASSWORD"))
}

// SignIn returns an option signing in as user with password (nothing when
// user is empty), with the inbox prefix [InboxPrefix] of user: a client
// credential may hear replies only there.
func SignIn(user, password string) nats.Option {
	return func(o *nats.Options) error {
		if user == "" {
			return nil
		}
		o.User, o.Password = user, password
		return nats.CustomInboxPrefix(InboxPrefix(user))(o)
	}
}

// InboxPrefix is the prefix of the inboxes of a connection signed in as
// user: _INBOX.<user>. Characters a subject token cannot hold are
// replaced.
func InboxPrefix(user string) string {
	return "_INBOX." + strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || r <= ' ' {
			return '_'
		}
		return r
	}, user)
}

// Join connects the named service to the platform at url (or at any of a
// cluster's servers: a comma-separated list), signed in as [UserFromEnv]
// says, and sets up the streams and buckets (see [Setup]) with the
// options the environment sets (see [SetupFromEnv]) and opts. The caller
// drains the connection when done.
func Join(ctx context.Context, url, name string, getenv func(string) string, log *slog.Logger, opts ...SetupOption) (*nats.Conn, jetstream.JetStream, error) {
	setup, err := SetupFromEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	nc, err := Connect(url, name, log, UserFromEnv(getenv))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		err = Setup(ctx, js, append(setup, opts...)...)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
