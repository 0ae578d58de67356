package natstest

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"corral.dev/pkg/credential"
)

// Cluster is a NATS cluster of embedded servers with JetStream, started by
// [RunCluster].
type Cluster struct {
	// Servers are the cluster's servers, named nats-1, nats-2 and so on.
	Servers []*server.Server
	// perPeer is how many route connections Servers[i] keeps to each
	// other server: a pool, and one for each pinned account (the system
	// account's among them).
	perPeer []int
}

// URL returns the client URLs of every server, comma separated, as
// nats.Connect and CORRAL_NATS_URL take them: a client connected to one
// moves to another when it dies.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// RunCluster starts n embedded NATS servers with JetStream, each storing in
// a temporary directory, clustered by routes on free ports, and waits until
// the cluster is whole: every server routes to every other on all of its
// route connections, all follow one JetStream meta leader, and the leader
// has heard from every server, so that it can place a stream of n
// replicas. When configFiles are given, server i reads configFiles[i]
// first (users, permissions, limits), and its listen addresses, routes and
// store directory are replaced by the test's. No stream is created: the
// caller runs bus.Setup with bus.Replicas. Every server is shut down, and
// waited for, before its directory is removed; the test may shut one down
// earlier.
func RunCluster(t testing.TB, n int, configFiles ...string) *Cluster {
	t.Helper()
	if len(configFiles) != 0 && len(configFiles) != n {
		t.Fatalf("natstest: %d config files for %d servers", len(configFiles), n)
	}
	routePorts := make([]int, n)
	for i := range routePorts {
		routePorts[i] = FreePort(t)
	}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	for i := range n {
		dir := t.TempDir() // registered before the shutdown, so removed after it
		opts := &server.Options{}
		if len(configFiles) != 0 {
			var err error
			if opts, err = server.ProcessConfigFile(configFiles[i]); err != nil {
				t.Fatalf("natstest: read %s: %v", configFiles[i], err)
			}
		}
		opts.ServerName = fmt.Sprintf("nats-%d", i+1)
		opts.Host, opts.Port = "127.0.0.1", -1
		opts.HTTPPort = 0
		opts.Cluster.Name = "corral"
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", routePorts[i]
		// Each server routes to those started before it, and to itself,
		// which it drops (JetStream in a cluster needs a route
		// configured): see the start below.
		opts.Routes = routes[:i+1]
		opts.JetStream = true
		opts.StoreDir = dir
		opts.NoSigs, opts.NoLog = true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("natstest: new server: %v", err)
		}
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		c.Servers = append(c.Servers, s)
		// NewServer has filled in the defaults.
		perPeer := 1
		if opts.Cluster.PoolSize > 0 {
			perPeer = opts.Cluster.PoolSize + len(opts.Cluster.PinnedAccounts)
		}
		c.perPeer = append(c.perPeer, perPeer)
	}
	// Started one after another, each once those it routes to listen. Were
	// they started together, each routing to all, every two would dial
	// each other at once, and dial again a second later a server not yet
	// listening the first time: the duplicate routes that makes are closed
	// on both sides, so that two servers can be left without a route for a
	// moment after the cluster looked formed, dropping what crosses (the
	// answer to a stream's creation), and a server whose first route comes
	// back is unplaceable to the JetStream leader until it next reports
	// its statistics ("no suitable peers for placement, peer offline").
	for _, s := range c.Servers {
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("natstest: %s not ready after 10s", s.Name())
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Whole()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: the cluster is not whole after 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// Whole returns nil when every server routes to every other on all of its
// route connections (a pool, and one for each pinned account, such as the
// system account's), all follow one JetStream meta leader of a group of
// every server, and the leader has heard from every server (statistics
// and all, as it needs them to place a stream there); otherwise, an error
// that says what the cluster looks like.
func (c *Cluster) Whole() error {
	var problems []string
	leaders := map[string]bool{}
	var leader *server.Server
	for i, s := range c.Servers {
		rz, err := s.Routez(nil)
		if err != nil {
			return fmt.Errorf("%s: routes: %w", s.Name(), err)
		}
		routes := map[string]int{}
		for _, r := range rz.Routes {
			routes[r.RemoteName]++
		}
		for _, o := range c.Servers {
			if o != s && routes[o.Name()] != c.perPeer[i] {
				problems = append(problems, fmt.Sprintf("%s has %d of %d routes to %s", s.Name(), routes[o.Name()], c.perPeer[i], o.Name()))
			}
		}
		jsz, err := s.Jsz(nil)
		if err != nil {
			return fmt.Errorf("%s: jetstream: %w", s.Name(), err)
		}
		switch {
		case jsz.Meta == nil || jsz.Meta.Leader == "":
			problems = append(problems, fmt.Sprintf("%s knows no JetStream leader", s.Name()))
		case jsz.Meta.Size != len(c.Servers):
			problems = append(problems, fmt.Sprintf("%s has a JetStream group of %d", s.Name(), jsz.Meta.Size))
		default:
			leaders[jsz.Meta.Leader] = true
		}
		if !s.JetStreamIsCurrent() {
			problems = append(problems, fmt.Sprintf("%s is not current with the JetStream leader", s.Name()))
		}
		if s.JetStreamIsLeader() {
			leader = s
		}
	}
	if leader == nil {
		problems = append(problems, "no server is the JetStream leader")
	}
	if len(leaders) > 1 {
		problems = append(problems, fmt.Sprintf("the servers follow different JetStream leaders %v", slices.Sorted(maps.Keys(leaders))))
	}
	if leader != nil {
		// The peers the leader has statistics of, as peer selection
		// takes them.
		if peers := leader.JetStreamClusterPeers(); len(peers) != len(c.Servers) {
			slices.Sort(peers)
			problems = append(problems, fmt.Sprintf("JetStream leader %s can place streams only on %v", leader.Name(), peers))
		}
	}
	if len(problems) != 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Leader returns the server that leads the JetStream stream name, or nil.
// The stream is the services' account's (a server configured as
// deploy/nats.conf is), or the global account's (one configured with no
// accounts).
func (c *Cluster) Leader(name string) *server.Server {
	for _, s := range c.Servers {
		for _, acc := range []string{credential.AccountServices, server.DEFAULT_GLOBAL_ACCOUNT} {
			if s.Running() && s.JetStreamIsStreamLeader(acc, name) {
				return s
			}
		}
	}
	return nil
}
