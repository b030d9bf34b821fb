package store

import "context"

// RequestRecord is one access request (gateway/requests): the columns
// listed and searched, and the request's JSON.
type RequestRecord struct {
	ID string
	// Requester is the requester's principal as KIND:NAME or
	// KIND:ISSUER:NAME (identity.Principal.String).
	Requester string
	// State is pending, approved, denied or expired.
	State   string
	Created int64 // Unix nanoseconds
	// Expires is when a pending request lapses or an approved one's
	// access ends, Unix nanoseconds.
	Expires int64
	// Data is the request's JSON.
	Data string
}

// Requests stores access requests: shared, so that a request made through
// one proxy is approved through another and honoured by all.
type Requests interface {
	// Insert adds r; ErrExists when its id is taken.
	Insert(ctx context.Context, r RequestRecord) error
	// Get returns request id; ErrNotFound when there is none.
	Get(ctx context.Context, id string) (RequestRecord, error)
	// Update reads request id, lets fn change it and writes the change
	// back, in one transaction that keeps any other Update of id out
	// until it ends; an error from fn aborts it and is returned (the ID
	// and Created stay). ErrNotFound when there is no such request.
	Update(ctx context.Context, id string, fn func(*RequestRecord) error) error
	// List returns up to limit requests, the newest first: those in state
	// (every state when ""), and only those expiring before expiresBefore
	// when it is not 0.
	List(ctx context.Context, state string, expiresBefore int64, limit int) ([]RequestRecord, error)
	Close() error
}
