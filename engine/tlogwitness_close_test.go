package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/annal-db/annal/engine/cosign"
)

// TestCloseAbandonsLateTlogWitnessRequests: with a quorum of 2 of 3 tlog
// witnesses, one of which never answers, a checkpoint is stored on the
// other two's cosignatures, and the request to the third goes on in the
// background. Close, called while that request is in flight, returns
// with no request to a witness left running in the process, and the
// mute witness saw the client of each request it held go away (run
// with -race: Close against a late request).
func TestCloseAbandonsLateTlogWitnessRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyFile, vkey := newKeyFile(t)
	fast1, fast2 := startTlogWitness(t, vkey), startTlogWitness(t, vkey)
	muteW, err := cosign.OpenWitness(t.TempDir(), cosign.WitnessOptions{Logs: []string{vkey}})
	if err != nil {
		t.Fatal(err)
	}
	defer muteW.Close()
	var held, abandoned atomic.Int64
	arrived := make(chan struct{}, 16)
	muteSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices the client's going away only then
		held.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done()
		abandoned.Add(1)
	}))
	defer muteSrv.Close()
	mute := &tlogWitnessServer{w: muteW, srv: muteSrv}
	opts := &Options{SigningKeyFile: keyFile, CheckpointInterval: -1, TlogWitnessQuorum: 2,
		TlogWitnesses: []cosign.WitnessConfig{mute.config(), fast1.config(), fast2.config()}}
	db := mkOpen(t, t.TempDir(), opts)
	mkLedger(t, db, "pay", 5)
	appendEvents(t, db, "pay", 3, appendSpec{From: 10})
	if _, err := db.Checkpoint(ctx, "pay"); err != nil {
		t.Fatal(err)
	}
	<-arrived // the checkpoint's request to the mute witness is in flight
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if strings.Contains(stacks, "engine.(*cosigners).ask") {
		t.Fatalf("a request to a tlog witness still runs after Close:\n%s", stacks)
	}
	mute.srv.Close() // waits for its handlers: each saw its client go
	if h, a := held.Load(), abandoned.Load(); h == 0 || a != h {
		t.Fatalf("the mute witness held %d requests, %d of them abandoned by the writer", h, a)
	}
}
