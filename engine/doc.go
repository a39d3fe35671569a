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
// The path of an append is one straight line: canonical JSON (package
// canon), then the segment log (package segment: timestamp, chain,
// checksum, group commit, fsync), then the index (package index, Pebble,
// not synced: it is rebuilt from the segments), and the metadata (bbolt)
// only on CreateLedger and Close.
//
// Open recovers every ledger: it verifies the segments after the index's
// checkpoint, cuts a torn write, refuses a corrupt ledger (the others
// open), and brings the index up to the segments; a missing index or
// metadata file is rebuilt. See docs/recovery.md.
//
// Copy a directory in use with DB.Backup, not file by file (cp -a, rsync:
// such a copy is refused when opened): its copy opens and verifies as it
// is. See "Backups" in docs/engine.md.
//
// A data directory:
//
//	DIR/LOCK              names the process holding the directory (its flock)
//	DIR/meta.db           bbolt: one record per ledger
//	DIR/index/            Pebble: the index of every ledger
//	DIR/ledgers/LLLLLLLL/ the segment files of ledger LLLLLLLL, and its NAME
//
// Files are created for the owner only (0600, directories 0700).
package engine
