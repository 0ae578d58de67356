package credential

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
)

// Service is a service's NATS user and what it may do: what
// deploy/nats.conf grants it (a test checks that the two agree) and what
// corral dev starts its server with.
type Service struct {
	User        string
	Permissions Permissions
	// Responds is set for a service that answers requests (allow_responses).
	Responds bool
}

// The service users.
const (
	UserHarness  = "harness"
	UserSandbox  = "sandbox-manager"
	UserMemory   = "memory"
	UserApproval = "approval"
	UserEgress   = "egress"
	// UserGateway keeps the session index and serves the HTTP API; what
	// it does for a tenant over the API it does signed in as the client
	// whose key the request carries.
	UserGateway = "gateway"
	// UserAuth answers the server's questions about client connections.
	UserAuth = "auth"
	// UserAdmin runs corral setup and manages credentials; it may do
	// anything.
	UserAdmin = "admin"
)

// jsRead is the JetStream API every service uses: reading streams and
// buckets, and consumers. Creating, changing, deleting and purging streams
// is the admin's alone (a stream re-publishing or sourcing into another
// would route around the subject permissions).
var jsRead = []string{
	"$JS.API.INFO", "$JS.API.STREAM.INFO.>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>", "$JS.API.CONSUMER.>",
	"$JS.ACK.>", "$JS.FC.>", "deadletter.>",
}

// jsReadOnly is jsRead for a service that needs only some streams: the
// JetStream API of streams (their info, direct and stored gets, and
// consumers of them), and of its own durable consumers on others, each
// made with the filter it has alone: one made again with another filter
// would read what it may not. Nothing else of the account's streams (the
// session logs, their large events, the uploads, the workspaces) is its
// to read.
func jsReadOnly(streams []string, durables ...durable) []string {
	out := []string{"$JS.API.INFO", "$JS.FC.>", "deadletter.>"}
	for _, s := range streams {
		out = append(out,
			"$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.*."+s, "$JS.API.CONSUMER.*."+s+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".>", "$JS.ACK."+s+".>")
	}
	for _, d := range durables {
		out = append(out,
			bus.ConsumerCreate+d.stream+"."+d.name+"."+d.filter,
			"$JS.API.CONSUMER.INFO."+d.stream+"."+d.name,
			"$JS.API.CONSUMER.MSG.NEXT."+d.stream+"."+d.name, "$JS.ACK."+d.stream+"."+d.name+".>")
	}
	return out
}

// durable is a service's durable consumer: its name, its stream and its
// filter.
type durable struct{ name, stream, filter string }

// denyConsumers denies a service the subjects of the other services'
// durable consumers: it may not create, change, pull from, acknowledge or
// delete them.
func denyConsumers(own ...string) []string {
	var out []string
	for _, d := range []string{bus.ConsumerHarnessRequests, bus.ConsumerHarnessSteps, bus.ConsumerSandboxCalls, bus.ConsumerMemoryCalls, bus.ConsumerApprovals, bus.ConsumerEgressDecisions, bus.ConsumerGatewayIndex, bus.ConsumerGatewayWebhooks, bus.ConsumerGatewayTraces} {
		mine := false
		for _, o := range own {
			mine = mine || o == d
		}
		if mine {
			continue
		}
		out = append(out,
			"$JS.API.CONSUMER.*.*."+d, "$JS.API.CONSUMER.*.*."+d+".>",
			"$JS.API.CONSUMER.*.*.*."+d, "$JS.ACK.*."+d+".>")
	}
	return out
}

// denyStream denies a service every JetStream API subject of stream:
// its info, direct and stored gets, and consumers.
func denyStream(stream string) []string {
	return []string{
		"$JS.API.*.*." + stream, "$JS.API.*.*." + stream + ".>",
		"$JS.API.*.*.*." + stream, "$JS.API.*.*.*." + stream + ".>",
	}
}

// denyVaults denies a service the vaults' stream, which would read the
// sealed secrets. Only the egress service reads it.
var denyVaults = denyStream("KV_" + bus.BucketVaults)

// denyWebhooks denies a service the webhooks' stream, as [denyVaults]
// the vaults': it holds the secrets that sign the tenants' webhooks. Only
// the gateway reads it.
var denyWebhooks = denyStream("KV_" + bus.BucketWebhooks)

// denyCalls denies a service the calls' stream: a call names the ID its
// result is to be recorded under ([event.ToolCall.ResultID]), which a
// service that read it could store something under first, and have the
// result dropped. Only the harness, which queues them, and the tool
// services, each through its own consumer, read it.
var denyCalls = denyStream(bus.StreamTools)

// events returns the subjects on which writer may publish the session
// events of kinds.
func events(writer string, kinds ...string) []string {
	var out []string
	for _, k := range kinds {
		out = append(out, fmt.Sprintf("events.*.*.%s.%s", k, writer))
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Services returns every service user but the admin, with its
// permissions: the table of the README's "Who may write what".
//
// Each service hears replies only on its own inboxes ([bus.SignIn] sets
// their prefix): none reads another's answers (events pulled, files
// previewed, API replies).
func Services() []Service {
	return []Service{
		{
			User: UserHarness,
			Permissions: Permissions{
				// It asks the tool services for previews of the calls it
				// holds for reviewers (preview.<service>.…), and publishes
				// the model's output as it streams (live.<tenant>.<session>).
				// It reads the environments, to resolve a request's, with
				// jsRead.
				Publish: concat(jsRead, []string{"$KV.leases.>", "$KV.usage.>", "tools.>", "payloads.>", "harness.lease.>", "preview.>", bus.LiveFilter("*")},
					events("harness", "session.requested", "model.responded", "tool.dispatched", "tool.completed",
						"approval.requested", "session.completed", "session.failed", "session.stopped", "budget.raise",
						"session.paused", "session.resumed", "context.compacted")),
				Deny: concat(denyConsumers(bus.ConsumerHarnessRequests, bus.ConsumerHarnessSteps), denyVaults, denyWebhooks),
				// Harnesses ask each other for the session leases
				// lingering after a step.
				Subscribe: []string{bus.InboxPrefix(UserHarness) + ".>", "harness.lease.>"},
			},
			Responds: true,
		},
		{
			// It reads the session logs (and their large events), the
			// files clients upload (the UPLOADS stream), its buckets and
			// stores, the environments and the skills; of the calls, its
			// own through its consumer alone: a consumer of its own making,
			// a direct one say, would read the memory service's. It writes
			// dead letters but reads none (they hold what others gave up).
			User: UserSandbox,
			Permissions: Permissions{
				Publish: concat(jsReadOnly([]string{bus.StreamEvents, bus.StreamPayloads, bus.StreamUploads,
					"KV_" + bus.BucketCalls, "KV_" + bus.BucketNodes, "KV_" + bus.BucketPlacements, "KV_" + bus.BucketEnvironments,
					"OBJ_" + bus.BucketSkills, "OBJ_" + bus.BucketWorkspaces},
					durable{bus.ConsumerSandboxCalls, bus.StreamTools, bus.ToolFilter(bus.ServiceSandbox)}), []string{
					// Replacing a snapshot's manifest purges the old one's chunks.
					"$JS.API.STREAM.PURGE.OBJ_" + bus.BucketWorkspaces,
					"$KV.calls.>", "$O.workspaces.>", "$KV.nodes.>", "$KV.placements.>", "payloads.>",
					// The environments: changed through its API, and
					// their builds recorded.
					"$KV." + bus.BucketEnvironments + ".>",
					// Calls, and requests for previews, forwarded to the
					// node a session is placed on.
					"sandbox.node.>",
					// A running Bash call's output, as it comes.
					bus.LiveFilter("*"),
				}, events("sandbox", "tool.completed")),
				Deny: concat(denyConsumers(bus.ConsumerSandboxCalls), denyVaults, denyWebhooks),
				// It answers the workspace and environment APIs (nats.go/micro
				// services, which also hear $SRV.>).
				Subscribe: []string{bus.InboxPrefix(UserSandbox) + ".>", "sandbox.node.>", bus.PreviewFilter(bus.ServiceSandbox), bus.WorkspaceAPI("*", "*", ">"),
					bus.EnvironmentAPI("*", "*", ">"), "$SRV.>"},
			},
			Responds: true,
		},
		{
			// It reads its own stores (the embedded one's bucket, the
			// skills) and its calls; no session's log: it records results
			// on the condition of the event before, which takes no read.
			User: UserMemory,
			Permissions: Permissions{
				Publish: concat(jsReadOnly([]string{"KV_memories", "OBJ_" + bus.BucketSkills}, durable{bus.ConsumerMemoryCalls, bus.StreamTools, bus.ToolFilter(bus.ServiceMemory)}), []string{
					"$JS.API.STREAM.PURGE.OBJ_" + bus.BucketSkills,
					// Pruning old versions in the embedded store.
					"$JS.API.STREAM.MSG.DELETE.KV_memories",
					"$KV.memories.>", "$O.skills.>", "payloads.>",
				}, events("memory", "tool.completed")),
				Deny:      concat(denyConsumers(bus.ConsumerMemoryCalls), denyVaults, denyWebhooks),
				Subscribe: []string{bus.InboxPrefix(UserMemory) + ".>", "corral.memory.>", "$SRV.>", bus.PreviewFilter(bus.ServiceMemory)},
			},
			Responds: true,
		},
		{
			// Its sessions console reads the session index with jsRead,
			// hears the sessions' output (live.<tenant>.<session>) and
			// sends stops as corral stop does: a request on the
			// session's user's subject (requests.<tenant>.<session>.<user>),
			// recorded by the harness as stopped by the person signed in.
			User: UserApproval,
			Permissions: Permissions{
				Publish:   concat(jsRead, []string{"$KV.approvals.>", "payloads.>", "requests.*.*." + bus.ConsoleToken}, events("approval", "approval.decided")),
				Deny:      concat(denyConsumers(bus.ConsumerApprovals), denyVaults, denyWebhooks, denyCalls),
				Subscribe: []string{bus.InboxPrefix(UserApproval) + ".>", "corral.approval.>", "$SRV.>", bus.LiveFilter("*")},
			},
			Responds: true,
		},
		{
			// On every sandbox node: it alone reads and writes the vaults,
			// asks reviewers about the requests it holds and hears their
			// decisions, and answers the vault API. It reads the
			// environments, for what their sessions may reach; no
			// session's log but the decisions its consumer hears.
			User: UserEgress,
			Permissions: Permissions{
				Publish: concat(jsReadOnly([]string{"KV_" + bus.BucketVaults, "KV_" + bus.BucketEgress, "KV_" + bus.BucketEnvironments}, durable{bus.ConsumerEgressDecisions, bus.StreamEvents, sessionlog.KindFilter(event.TypeApprovalDecided)}), []string{"$KV." + bus.BucketVaults + ".>", "$KV." + bus.BucketEgress + ".>"},
					events("egress", "approval.requested")),
				Deny:      concat(denyConsumers(bus.ConsumerEgressDecisions), denyWebhooks),
				Subscribe: []string{bus.InboxPrefix(UserEgress) + ".>", bus.VaultAPI("*", "*", ">"), "$SRV.>"},
			},
			Responds: true,
		},
		{
			// It folds every session's log into the session index, which
			// it alone writes. It reads the logs (and their large events)
			// with jsRead, and dead-letters what it rejects. Nothing a
			// tenant asks of the HTTP API is done as the gateway: it signs
			// in as the client whose key the request carries. It keeps
			// the tenants' webhooks and their secrets, which it alone
			// reads, answers their API (corral webhooks), posts them from
			// its own consumer of the logs and records each attempt.
			User: UserGateway,
			Permissions: Permissions{
				Publish: concat(jsRead, []string{"$KV." + bus.BucketSessions + ".>",
					"$KV." + bus.BucketWebhooks + ".>", bus.WebhookDeliverySubject("*", "*", "*")}),
				Deny:      concat(denyConsumers(bus.ConsumerGatewayIndex, bus.ConsumerGatewayWebhooks, bus.ConsumerGatewayTraces), denyVaults, denyCalls),
				Subscribe: []string{bus.InboxPrefix(UserGateway) + ".>", bus.WebhookAPI("*", "*", ">"), "$SRV.>"},
			},
			Responds: true,
		},
		{
			// It reads the credentials bucket, answers the server on
			// $SYS.REQ.USER.AUTH (which the server lets it hear), and
			// creates and lists clients' consumers for its gate.
			User: UserAuth,
			Permissions: Permissions{
				Publish: append([]string{"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_" + bus.BucketCredentials, "$JS.API.DIRECT.GET.KV_" + bus.BucketCredentials + ".>", "$JS.API.STREAM.MSG.GET.KV_" + bus.BucketCredentials},
					gateAPI()...),
				Subscribe: []string{bus.InboxPrefix(UserAuth) + ".>", "$SYS.REQ.USER.AUTH", bus.ConsumerGate + ">"},
			},
			Responds: true,
		},
	}
}

// Reads returns what user's permissions let it read of the streams (its
// info, gets and consumers): for [bus.Reading], so that a service sets up
// only what it may read. It returns nil, everything, for a user that is
// not one of [Services].
func Reads(user string) func(stream string) bool {
	for _, s := range Services() {
		if s.User != user {
			continue
		}
		return func(stream string) bool {
			info := "$JS.API.STREAM.INFO." + stream
			match := func(filters []string) bool {
				return slices.ContainsFunc(filters, func(f string) bool { return server.SubjectMatchesFilter(info, f) })
			}
			return match(s.Permissions.Publish) && !match(s.Permissions.Deny)
		}
	}
	return nil
}

// GatedStreams are the streams clients may create consumers on, through
// the auth service's gate.
func GatedStreams() []string {
	var out []string
	for _, s := range ClientImports() {
		if rest, ok := strings.CutPrefix(s, bus.ConsumerCreate); ok {
			stream, _, _ := strings.Cut(rest, ".")
			if !slices.Contains(out, stream) {
				out = append(out, stream)
			}
		}
	}
	return out
}

// gateAPI is what the gate asks of JetStream: creating consumers on the
// gated streams, and listing them to count a client's.
func gateAPI() []string {
	var out []string
	for _, stream := range GatedStreams() {
		out = append(out, bus.ConsumerCreate+stream+".>", "$JS.API.CONSUMER.LIST."+stream)
	}
	return out
}

// ServerUser returns s as the NATS server's user signing in with password,
// as deploy/nats.conf defines it.
func (s Service) ServerUser(password string) *server.User {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: s.Permissions.Publish, Deny: s.Permissions.Deny},
		Subscribe: &server.SubjectPermission{Allow: s.Permissions.Subscribe},
	}
	if s.Responds {
		// What allow_responses: true means in a config file.
		p.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return &server.User{Username: s.User, Password: password, Permissions: p}
}

// AuthUsers are the users the server signs in itself, by password: the
// services and the admin. Everyone else is a client, whom the auth service
// signs in.
func AuthUsers() []string {
	out := []string{UserAdmin}
	for _, s := range Services() {
		out = append(out, s.User)
	}
	return out
}
