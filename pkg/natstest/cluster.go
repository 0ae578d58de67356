package natstest

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a NATS cluster of embedded servers with JetStream, started by
// [RunCluster].
type Cluster struct {
	// Servers are the cluster's servers, named nats-1, nats-2 and so on.
	Servers []*server.Server
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
// they have elected a JetStream leader. When configFiles are given, server
// i reads configFiles[i] first (users, permissions, limits), and its listen
// addresses, routes and store directory are replaced by the test's. No
// stream is created: the caller runs bus.Setup with bus.Replicas. Every
// server is shut down, and waited for, before its directory is removed;
// the test may shut one down earlier.
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
		opts.Routes = routes
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
	}
	// Started together: JetStream in a cluster waits for its peers.
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		wg.Go(s.Start)
	}
	wg.Wait()
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("natstest: %s not ready after 10s", s.Name())
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.ready() {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: the cluster elected no JetStream leader within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// ready reports whether every server routes to every other and one is the
// JetStream leader.
func (c *Cluster) ready() bool {
	leader := false
	for _, s := range c.Servers {
		if s.NumRoutes() < len(c.Servers)-1 || !s.JetStreamIsCurrent() {
			return false
		}
		leader = leader || s.JetStreamIsLeader()
	}
	return leader
}

// Leader returns the server that leads the JetStream stream name, or nil.
func (c *Cluster) Leader(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Running() && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, name) {
			return s
		}
	}
	return nil
}
