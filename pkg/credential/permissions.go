package credential

import (
	"corral.dev/pkg/bus"
)

// Permissions are the subjects a client may publish to and subscribe to.
type Permissions struct {
	Publish   []string
	Deny      []string
	Subscribe []string
}

// Permissions returns what a client signed in with c may do. Every subject
// names c's tenant, and for a user's credential its user (for a bot or a
// reviewer, any user of the tenant):
//   - requests (prompts, stops, raises) on requests.<tenant>.*.<user>;
//   - the memory API as that user, and the approval API (a reviewer
//     decides);
//   - the vault API for that user's vaults, and a reviewer's and an
//     operator's for the tenant's own;
//   - the workspace API (the files of the tenant's sessions' last
//     snapshots) as that user;
//   - the environment API: reading the tenant's environments as that
//     user, and for a reviewer and an operator changing them (an
//     environment decides what its sessions may reach on the network),
//     as the tenant's own vaults;
//   - the webhook API (the gateway's): listing the tenant's webhooks and
//     their deliveries as that user, and for a reviewer and an operator
//     adding, removing and testing them (a webhook sends the tenant's
//     session events to an outside server), as the tenant's own vaults;
//   - the tenant's session logs, read with single-filter consumers under
//     events.<tenant>. (the server refuses a consumer whose filter is not
//     the one its create subject names), pulls, and direct gets of the
//     last message of a subject, and their stored large events;
//   - the tenant's daily usage, the same way;
//   - uploads of files for sessions to start from, staged under
//     uploads.<tenant>.<user>. (for a bot, a reviewer and an operator,
//     any user of the tenant): published, and read back by direct gets
//     of the last message of a subject there, to find what is uploaded
//     already;
//   - for a bot, a reviewer and an operator (who speak for the tenant's
//     users: the Slack bridge), the tenant's keys of the Slack bridge's
//     bucket, <tenant>.>: read the same way, and written by publishing
//     on them (a put, or a compare-and-set with the expected last
//     sequence of the key's subject);
//   - the session index of the tenant ([bus.BucketSessions]), read the
//     same way; the gateway alone writes it;
//   - the tenant's keys of the gateway's bucket ([bus.BucketGateway]:
//     the HTTP API's agents, sessions, files and vaults), read the same
//     way and written by publishing on them: for a user, its own user's
//     agents alone (<tenant>.agent.<user>.>; every agent of the tenant,
//     <tenant>.agent.>, read, since a session of any may be started, but
//     an agent's system prompt and always_ask tools apply to every
//     session of it, so only its owner, a reviewer and an operator change
//     it), its own user's sessions alone (<tenant>.session.<user>.>),
//     whose records say what a session starts from and as whom, and its
//     own user's files (<tenant>.file.<user>.>, the Files API's, whose
//     contents are that user's uploads), and the tenant's vaults
//     (<tenant>.vault.>) read only;
//   - who the server says the client is ([UserInfoSubject], answered
//     by the server itself; see [Whoami]);
//   - the live output of the tenant's sessions, [bus.LiveFilter]: heard,
//     as its session logs are read (published by the harness and the
//     sandbox-managers, carried to the clients' account by
//     [ClientStreams]).
//
// Nothing else: no stream's info (which would list other tenants'
// subjects), no batched direct get (whose subject names no filter), no
// other tenant's anything, and no subject of the services' own durable
// consumers (which a create under their name would change).
func (c Credential) Permissions() Permissions {
	t, u := c.Tenant, "*"
	if c.Role == RoleUser {
		u = bus.UserToken(c.User)
	}
	p := Permissions{
		Publish: []string{
			"requests." + t + ".*." + u,
			bus.MemoryAPI(t, u, ">"),
			bus.ApprovalAPI(t, u, bus.OpList),
			bus.VaultAPI(t, u, ">"),
			bus.WorkspaceAPI(t, u, ">"),
			bus.EnvironmentAPI(t, u, ">"),
			bus.WebhookAPI(t, u, ">"),
			"$JS.API.CONSUMER.CREATE." + bus.StreamEvents + ".*.events." + t + ".>",
			"$JS.API.CONSUMER.MSG.NEXT." + bus.StreamEvents + ".*",
			"$JS.API.CONSUMER.DELETE." + bus.StreamEvents + ".*",
			"$JS.API.DIRECT.GET." + bus.StreamEvents + ".events." + t + ".>",
			"$JS.API.DIRECT.GET." + bus.StreamPayloads + "." + bus.PayloadSubject(t, "*"),
			bus.UploadFilter(t, u),
			"$JS.API.DIRECT.GET." + bus.StreamUploads + "." + bus.UploadFilter(t, u),
			"$JS.API.CONSUMER.CREATE.KV_" + bus.BucketUsage + ".*.$KV." + bus.BucketUsage + "." + t + ".>",
			"$JS.API.CONSUMER.MSG.NEXT.KV_" + bus.BucketUsage + ".*",
			"$JS.API.CONSUMER.DELETE.KV_" + bus.BucketUsage + ".*",
			"$JS.API.DIRECT.GET.KV_" + bus.BucketUsage + ".$KV." + bus.BucketUsage + "." + t + ".>",
		},
		Subscribe: []string{c.Inbox() + ".>", bus.LiveFilter(t)},
	}
	switch c.Role {
	case RoleReviewer:
		// Decided as the reviewer the credential names.
		p.Publish = append(p.Publish, bus.ApprovalAPI(t, bus.UserToken(c.User), bus.OpDecide))
	case RoleOperator:
		p.Publish = append(p.Publish, bus.ApprovalAPI(t, u, bus.OpDecide))
	default:
		// A bot speaks for any user, whose token the wildcard above
		// matches, and so would the tenant's own vaults' token.
		p.Deny = append(p.Deny, bus.VaultAPI(t, bus.VaultTenantScope, ">"), bus.EnvironmentAPI(t, bus.VaultTenantScope, ">"),
			bus.WebhookAPI(t, bus.VaultTenantScope, ">"))
	}
	if c.Role != RoleUser {
		p.Publish = append(p.Publish, slackKeys(t)...)
	}
	// The session index, which the gateway alone writes, read; and the
	// gateway's records of the tenant (its API's agents, sessions, files
	// and vaults), read and written through the gateway as this
	// credential. A user's reach only its own user's sessions: a record
	// of a session not yet started says what its first request starts
	// from (environment, repository, model) and as whom, so another
	// user's write would run that user's session, with that user's
	// vaults, from the writer's choices. Likewise only its own user's
	// agents, kept under their owner's token: an agent's system prompt
	// and always_ask tools apply to every session of it, so another
	// user's write would instruct its owner's sessions, or drop the
	// approvals they rely on. A reviewer and an operator change any
	// agent of the tenant (and an agent made before agents had owners,
	// <tenant>.agent.<id>, they alone).
	p.Publish = append(p.Publish, bucketKeys(bus.BucketSessions, false, t)...)
	if c.Role == RoleUser {
		p.Publish = append(p.Publish, bucketKeys(bus.BucketGateway, true, t+".agent."+u, t+".session."+u, t+".file."+u)...)
		// Every agent of the tenant, and the API's vaults, read: a
		// reviewer or an operator makes the vaults.
		p.Publish = append(p.Publish, bucketKeys(bus.BucketGateway, false, t+".agent", t+".vault")...)
	} else {
		p.Publish = append(p.Publish, bucketKeys(bus.BucketGateway, true, t)...)
	}
	p.Publish = append(p.Publish, UserInfoSubject)
	// The sessions console's stops, which the approval service alone
	// sends (a bot's or a reviewer's wildcard would match it).
	p.Deny = append(p.Deny, "requests."+t+".*."+bus.ConsoleToken)
	for _, d := range bus.EventDurables() {
		p.Deny = append(p.Deny,
			"$JS.API.CONSUMER.*."+bus.StreamEvents+"."+d,
			"$JS.API.CONSUMER.*."+bus.StreamEvents+"."+d+".>",
			"$JS.API.CONSUMER.*.*."+bus.StreamEvents+"."+d,
		)
	}
	return p
}

// bucketKeys are the subjects that read the keys of bucket under each of
// prefixes (<prefix>.…, a prefix starting with the tenant): direct gets of
// a key, and consumers filtered to keys under a prefix; with write, also
// the subjects of the keys themselves (a put, or a compare-and-set with
// the expected last sequence of the key's subject). A bucket clients
// write allows no roll-up (see the gateway's Setup): a publish on one's
// own keys cannot purge anyone else's.
func bucketKeys(bucket string, write bool, prefixes ...string) []string {
	stream := "KV_" + bucket
	var out []string
	for _, prefix := range prefixes {
		keys := "$KV." + bucket + "." + prefix + ".>"
		if write {
			out = append(out, keys)
		}
		out = append(out,
			"$JS.API.DIRECT.GET."+stream+"."+keys,
			"$JS.API.CONSUMER.CREATE."+stream+".*."+keys,
		)
	}
	return append(out,
		"$JS.API.CONSUMER.MSG.NEXT."+stream+".*",
		"$JS.API.CONSUMER.DELETE."+stream+".*",
	)
}

// slackKeys are the subjects that read and write tenant's keys of
// [bus.BucketSlack]. The bucket's stream allows no roll-up (see the Slack
// bridge's Setup): a publish on one's own keys cannot purge another
// tenant's.
func slackKeys(tenant string) []string {
	stream, keys := "KV_"+bus.BucketSlack, "$KV."+bus.BucketSlack+"."+tenant+".>"
	return []string{
		keys,
		"$JS.API.DIRECT.GET." + stream + "." + keys,
		"$JS.API.CONSUMER.CREATE." + stream + ".*." + keys,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
	}
}
