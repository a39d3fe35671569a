// Package fuzz holds fuzz targets that span packages. Fuzz targets of one
// package stay beside its code (canon, eventid); the ones here exercise
// several packages together, the way a user's input reaches them.
//
// Run one with, for example:
//
//	go test -run='^$' -fuzz='^FuzzNDJSONTamper$' -fuzztime=1m ./fuzz
//
// .ci/fuzz runs every target for a short budget in CI.
package fuzz
