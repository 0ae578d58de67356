// Package event holds the Go types of every message that crosses the bus:
// the requests clients publish, the tool calls the harness dispatches, and
// the events that make up a session's log. Each type's doc names its JSON
// Schema under schemas/; every message carries a "type" field holding the
// schema's type name (corral.<domain>.v1.<name>), which [Parse] dispatches on.
package event
