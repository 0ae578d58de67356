// Package memory keeps /memories and /skills: files the model reads and
// edits with its ordinary file tools, shared by a tenant (and, under
// /memories/private, by one user), versioned so that concurrent writers
// never silently overwrite each other. It consumes the memory tool queue,
// answers each call from a [Store] (PostgreSQL, or a JetStream KV bucket
// when there is no database), and records the result in the session's log.
package memory
