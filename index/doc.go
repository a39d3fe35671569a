// Package index will hold annal's Pebble index, all of it derivable from the
// segment files: event ID to location, sequence number, entity stream, event
// name and idempotency key (DESIGN.md, "Storage"). It is built with the
// engine (issue 4); until then it has no API.
package index
