// Package engine will be annal's public API: Open, ledgers, Append, Get,
// Scan, Subscribe, Verify and recovery on open (DESIGN.md). It is built by
// issue 4. Its subpackage ndjson already reads and verifies the Evently
// NDJSON interchange format.
package engine
