// Package replica ships a ledger's records to an object store and reads
// them back (docs/replication.md): the WAL chunks and manifests of the
// layout (chunk.go, manifest.go, names.go), the Writer that uploads a
// ledger's committed records and holds its epoch (one writer per ledger
// across machines) and publishes the log as C2SP tlog-tiles beside each
// checkpoint (tiles.go; partial tiles collected, tilegc.go), and the Reader that a restore and a takeover read the
// bucket with, verifying every object.
//
// The engine owns a Writer per ledger: it feeds it the spans that the
// segment log's Hooks.Records gives (segment.Span, with the Merkle
// leaves the engine hashed for them), and an append in Replicated mode
// waits for Writer.Wait. The store is engine/internal/replica/store.
package replica
