// Package segment will hold annal's checksum-chained segment files, the one
// source of truth of every ledger: record framing, rotation, group commit,
// sync, and torn-tail repair (DESIGN.md, "Storage" and "Durability and
// concurrency"). It is built by issue 3; until then it has no API.
package segment
