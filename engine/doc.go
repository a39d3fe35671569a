// Package engine is annal as a Go program uses it: open a data directory,
// create ledgers, append events, and read them back by ID, by time, by
// sequence number and by entity stream.
//
//	db, err := engine.Open("./annal-data", nil) // Sync durability, tail verified
//	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: "orders"})
//	res, err := db.Append(ctx, "orders", []engine.EventInput{{
//		Entity: "order", Key: "order-42", Event: "order-placed",
//		Meta: []byte(`{"actor":"web"}`), Data: []byte(`{"total":12.5}`),
//	}}, nil)
//	ev, err := db.Get(ctx, res.IDs[0]) // res.FirstSeq: the first event's sequence number
//	for ev, err := range db.Scan(ctx, "orders", engine.ScanOptions{From: time.Now().Add(-time.Hour)}) { … }
//
// An append is made canonical JSON (package canon) and handed to the
// ledger's segment log (package segment), which commits concurrent
// appends in groups: one goroutine, the leader, timestamps, chains and
// checksums each group, writes it and fsyncs it. The ledger takes part in
// each commit through the log's hooks (segment.Hooks, given when the log
// is opened): the append's conditions are checked, and its events kept in
// flight for the conditions that follow, as the group is assembled; the
// group is added to the index (package index, Pebble, not synced: it is
// rebuilt from the segments) and its Merkle leaves hashed during its
// fsync; once it is durable, its leaves go to the tree and it is
// published to readers, before any of its appenders returns.
//
// The metadata file (meta.db, bbolt) is never written on an append's
// path. It is written by Open (the records recovery changed), CreateLedger,
// Import and AcceptLedger, by the witness writer every
// Options.WitnessInterval (the ledgers whose durable head advanced: see
// witness.go), by a consumer storing its position and DeleteConsumer, by
// AcceptLostPositions, and by Close.
//
// # Locks
//
// The locks of a write are taken in one order: DB.creating → DB.mu →
// a ledger's segment log (its ioMu, held by the commit's leader while
// the hooks run) → the ledger's idxMu → its pendMu; the segment log's
// own order is ioMu → fsyncMu → mu (see segment/log.go). A lock taken by a
// hook comes after ioMu, so none may be held while calling the log's
// Append, Sync or Close; a Consumer's mu is taken before them (it syncs
// the log before it stores a position). A ledger's ckMu (its signed
// checkpoints) is taken before its idxMu and never under ioMu.
//
// Open recovers every ledger: it verifies the segments after the index's
// progress marker, cuts a torn write, refuses a corrupt ledger (the others
// open), and brings the index up to the segments; a missing index or
// metadata file is rebuilt. See docs/recovery.md.
//
// Copy a directory in use with DB.Backup, not file by file (cp -a, rsync:
// such a copy is refused when opened): its copy opens and verifies as it
// is. See "Backups" in docs/engine.md.
//
// docs/internals.md is the map of this code for a newcomer: the package
// graph, an append hop by hop with the lock held at each step, Open's
// recovery, the read paths, every goroutine the library starts and who
// stops it, and a glossary ("checkpoint" there means only the signed
// Merkle checkpoint; the index's record of how far it has indexed is its
// progress marker).
//
// A data directory:
//
//	DIR/LOCK                names the process holding the directory (its flock)
//	DIR/meta.db             bbolt: one record per ledger, the consumers' positions
//	DIR/index/              Pebble: the index of every ledger
//	DIR/signing.key         the key that signs checkpoints (unless Options.Signer
//	                        or SigningKeyFile), with signing.key.state (what it
//	                        signed), signing.key.state.lock and signing.pub
//	DIR/ledgers/LLLLLLLL/   ledger LLLLLLLL: its segment files (NNNN….seg), NAME,
//	                        tree (the Merkle tree's hashes), checkpoint (the
//	                        latest signed one), sealed (the stamps of sealed
//	                        segments, a cache) and written (the stamps of the
//	                        segments the last session wrote, for readers)
//
// docs/format.md says what each holds, byte by byte (sections 6 to 10).
// Files are created for the owner only (0600, directories 0700).
//
// With Options.Replica, every ledger is also replicated to an
// S3-compatible bucket (docs/replication.md): Replicated mode returns an
// append once the bucket holds it, Shipped mode within ShipInterval;
// Restore makes a data directory from a bucket, Takeover makes a
// directory the ledgers' writer, fencing the one before.
package engine
