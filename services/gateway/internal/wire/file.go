package wire

import "time"

// File is a file of the Files API, as the API shows its metadata.
type File struct {
	Type         string    `json:"type"`
	ID           string    `json:"id"`
	Filename     string    `json:"filename"`
	MimeType     string    `json:"mime_type"`
	SizeBytes    int64     `json:"size_bytes"`
	CreatedAt    time.Time `json:"created_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	Downloadable bool      `json:"downloadable"`
	// Scope is always null: every file is one a client uploaded, none a
	// session's.
	Scope any `json:"scope"`
}

// DeletedFile is the answer to a file's deletion.
type DeletedFile struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}
