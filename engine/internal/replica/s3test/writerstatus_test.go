package s3test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
)

// TestShippedWriterStoppedByDamageSaysWhy: a Shipped writer that meets
// another object under its next chunk's key (not a chunk: damage) stops
// uploading while its appends go on locally; ReplicaStatus says why, as
// its last error, naming the key.
func TestShippedWriterStoppedByDamageSaysWhy(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	prefix := fmt.Sprintf("status%d", prefixes.Add(1))
	db, err := engine.Open(t.TempDir(), &engine.Options{Replica: bucketURL(endpoint, prefix), Replication: engine.Shipped,
		ShipInterval: 100 * time.Millisecond, SigningKeyFile: filepath.Join(t.TempDir(), "signer.key")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := db.CreateLedger(ctx, engine.LedgerSpec{Name: lossLedger})
	if err != nil {
		t.Fatal(err)
	}
	appendOne := func(i int) engine.AppendResult {
		t.Helper()
		res, err := db.Append(ctx, lossLedger, []engine.EventInput{{Entity: "account", Key: "a", Event: "paid", Data: []byte(eventData(1, 0, i))}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if err := db.WaitReplicated(ctx, appendOne(0).IDs[0]); err != nil {
		t.Fatal(err)
	}
	rs, err := db.ReplicaStatus(lossLedger)
	if err != nil {
		t.Fatal(err)
	}
	next := replica.ChunkKey(info.ID, rs.Chunks+1)
	if _, err := openPrefix(t, prefix).Put(ctx, next, []byte("not a chunk"), store.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	appendOne(1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rs, err = db.ReplicaStatus(lossLedger)
		if err != nil {
			t.Fatal(err)
		}
		if rs.LastError != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: the writer stopped on %s and its last error says nothing", rs, next)
		}
	}
	if !strings.Contains(rs.LastError.Error(), next) || rs.Fenced || rs.Lag == 0 {
		t.Fatalf("status %+v; want the lag and the error naming %s", rs, next)
	}
	appendOne(2) // Shipped: the appends go on locally
}
