// Package memoryapi is the contract of the memory service's request/reply
// API: the operations on a tenant's memories and skills, the requests and
// answers they take, and the subjects they go on. Clients (the CLI's
// memories and skills commands) import it without importing the service.
package memoryapi

import (
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
)

// Operations of the API: the last token of its subjects.
const (
	OpList   = "ls"
	OpGet    = "cat"
	OpPut    = "put"
	OpRemove = "rm"
	// OpLog lists a file's kept versions.
	OpLog = "log"
	// OpRestore writes a kept version of a file back as its newest.
	OpRestore = "restore"
)

// Subject is where a client acting as user of tenant asks for op (one of
// [OpList], [OpGet], [OpPut], [OpRemove], [OpLog], [OpRestore]):
//
//	corral.memory.<tenant>.<user token>.<op>
//
// with the user as a [bus.UserToken]. Each request is an [APIRequest] and
// is answered with an [APIResponse]. The service takes tenant and user
// from the subject, never from the body: the NATS permissions let a client
// publish only for its own tenant, and a user's credential only as its own
// user, so the subject says whose memories a request reads and writes
// (/memories/private is the subject's user's) and who wrote them.
func Subject(tenant, user, op string) string {
	return bus.MemoryAPI(tenant, bus.UserToken(user), op)
}

// APIRequest is a request to the API, sent on its op's [Subject]. Tenant
// and User may be left empty: they are the subject's. A request naming
// another tenant or user than its subject's is refused.
type APIRequest struct {
	Tenant string `json:"tenant,omitempty"`
	User   string `json:"user,omitempty"`
	Path   string `json:"path"`
	// Content is what put writes.
	Content string `json:"content,omitempty"`
	// Op identifies the operation, so that a retried put, rm or restore
	// is applied once: a client makes a fresh one (uuid.NewV7) per
	// operation and sends it again with each retry.
	Op uuid.UUID `json:"op"`
	// Recursive makes rm remove every file under Path.
	Recursive bool `json:"recursive,omitempty"`
	// Version is the version restore writes back.
	Version int64 `json:"version,omitempty"`
}

// APIFile is a file as the API returns it. Content is set only by cat.
type APIFile struct {
	Path      string    `json:"path"`
	Owner     string    `json:"owner,omitempty"`
	Size      int       `json:"size"`
	Version   int64     `json:"version"`
	UpdatedBy string    `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
	Content   string    `json:"content,omitempty"`
}

// APIVersion is one kept version of a file, as log returns it.
type APIVersion struct {
	Version int64 `json:"version"`
	// Removed marks the removal of the file.
	Removed   bool      `json:"removed,omitempty"`
	Size      int       `json:"size"`
	ChangedBy string    `json:"changed_by"`
	ChangedAt time.Time `json:"changed_at"`
}

// APIResponse is the answer to an API request: Files for ls, cat, put and
// restore; Removed, the number of files removed, for rm; Versions, oldest
// first, for log.
type APIResponse struct {
	Files    []APIFile    `json:"files,omitempty"`
	Removed  int          `json:"removed,omitempty"`
	Versions []APIVersion `json:"versions,omitempty"`
}

// Error codes of the API, in the Nats-Service-Error-Code header: a request
// refused as written (a bad path, a missing file, a conflicting write, a
// full memory), which sending it again does not change, or the service's
// own failure.
const (
	CodeBadRequest = "400"
	CodeInternal   = "500"
)
