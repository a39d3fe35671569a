package s3test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annal-db/annal/engine"
	"github.com/annal-db/annal/engine/internal/replica"
	"github.com/annal-db/annal/engine/internal/replica/store"
	"github.com/annal-db/annal/eventid"
)

// The child node: the test binary run again with nodeEnv set (its value
// the node's name) opens a data directory as a node of the bucket
// (Options.Node, TakeOverDeadNodes) and serves appends over HTTP on the
// loopback until SIGTERM (then it closes the DB) or SIGKILL. It prints
// "ready URL" on standard output once it serves.
const (
	nodeEnv     = "ANNAL_S3TEST_NODE"
	nodeDir     = "ANNAL_S3TEST_NODE_DIR"
	nodeReplica = "ANNAL_S3TEST_NODE_REPLICA"
	nodeKey     = "ANNAL_S3TEST_NODE_KEY"
	nodeLease   = 1 * time.Second
)

func init() { childMains[nodeEnv] = runNode }

// runNode is the child node's main.
func runNode(name string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "node", name+":", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	addr := "http://" + ln.Addr().String()
	db, err := engine.Open(os.Getenv(nodeDir), &engine.Options{
		Replica: os.Getenv(nodeReplica), SigningKeyFile: os.Getenv(nodeKey),
		SegmentSize: 32 << 10, CheckpointInterval: 100 * time.Millisecond, StoreTimeout: 3 * time.Second,
		Node: engine.Node{Name: name, Address: addr}, NodeLease: nodeLease, TakeOverDeadNodes: true,
	})
	if err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /create", func(w http.ResponseWriter, r *http.Request) {
		_, err := db.CreateLedger(r.Context(), engine.LedgerSpec{Name: r.FormValue("name")})
		nodeAnswer(w, "", err)
	})
	mux.HandleFunc("POST /append", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		res, err := db.Append(r.Context(), r.FormValue("ledger"), []engine.EventInput{{Entity: "acct", Key: r.FormValue("key"), Event: "paid", Data: body}},
			&engine.AppendOptions{IdempotencyKey: r.FormValue("key")})
		id := ""
		if err == nil {
			id = res.IDs[0].String()
		}
		nodeAnswer(w, id, err)
	})
	mux.HandleFunc("GET /get", func(w http.ResponseWriter, r *http.Request) {
		id, err := eventid.Parse(r.FormValue("id"))
		if err == nil {
			_, err = db.Get(r.Context(), id)
		}
		nodeAnswer(w, "", err)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	fmt.Println("ready", addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	srv.Close()
	if err := db.Close(); err != nil {
		return fail(err)
	}
	return 0
}

// nodeAnswer writes the outcome of a request: 200 and body, 409 for a
// ledger this node does not write (route again), 500 otherwise.
func nodeAnswer(w http.ResponseWriter, body string, err error) {
	switch {
	case err == nil:
		io.WriteString(w, body)
	case errors.Is(err, engine.ErrFenced), errors.Is(err, engine.ErrNotOwner), errors.Is(err, engine.ErrLedgerNotFound),
		errors.Is(err, engine.ErrLedgerUnavailable), errors.Is(err, engine.ErrLedgerExists):
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// nodeProc is a running child node.
type nodeProc struct {
	name, addr string
	cmd        *exec.Cmd
	stderr     bytes.Buffer
}

func startNode(t *testing.T, name, dir, replicaURL, key string) *nodeProc {
	t.Helper()
	n := &nodeProc{name: name}
	n.cmd = exec.Command(os.Args[0], "-test.run=^$")
	n.cmd.Env = append(os.Environ(), nodeEnv+"="+name, nodeDir+"="+dir, nodeReplica+"="+replicaURL, nodeKey+"="+key)
	n.cmd.Stderr = &n.stderr
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			n.cmd.Process.Kill()
			n.cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if err != nil || !ok {
		n.cmd.Process.Kill()
		n.cmd.Wait()
		t.Fatalf("node %s did not start: %q, %v; stderr: %s", name, line, err, n.stderr.String())
	}
	n.addr = addr
	return n
}

// stop closes the node (SIGTERM: its DB closes, with a last checkpoint
// of each ledger).
func (n *nodeProc) stop(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	if err := n.cmd.Wait(); err != nil {
		t.Errorf("node %s: %v; stderr: %s", n.name, err, n.stderr.String())
	}
}

// post sends a request to a node; it returns the body and whether the
// node answered 200, or an error for a node that did not answer.
func post(ctx context.Context, method, u string, body string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, nil
}

// TestVersityGWNodesTakeOverKilledNode: three node processes on three
// directories share one bucket; 30 ledgers are placed on them by a
// Router; 8 clients append through the Router; one node is SIGKILLed:
// the other two take its ledgers once its lease has lapsed, and the
// clients, routing again, go on. Then: every acknowledged event is on
// its ledger's owner and in a restore of the bucket, each epoch of each
// ledger has one writer, and a follower of the bucket holds every
// ledger's signed checkpoint, at its head.
func TestVersityGWNodesTakeOverKilledNode(t *testing.T) {
	credentialsInEnvironment(t, secret)
	ctx := context.Background()
	replicaURL := fmt.Sprintf("s3://%s/nodes%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	key := filepath.Join(t.TempDir(), "nodes.key")
	// The key file made once, before the nodes share it.
	kdb, err := engine.Open(t.TempDir(), &engine.Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	kdb.Close()
	nodes := map[string]*nodeProc{}
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes[name] = startNode(t, name, t.TempDir(), replicaURL, key)
	}
	router, err := engine.NewRouter(ctx, replicaURL)
	if err != nil {
		t.Fatal(err)
	}
	const ledgers = 30
	placed := map[string]string{}
	for i := range ledgers {
		name := fmt.Sprintf("ledger-%02d", i)
		n, err := router.Place(name)
		if err != nil {
			t.Fatal(err)
		}
		placed[name] = n.Name
		if body, code, err := post(ctx, "POST", n.Address+"/create?name="+url.QueryEscape(name), ""); err != nil || code != 200 {
			t.Fatalf("create %s on %s: %d %s %v", name, n.Name, code, body, err)
		}
	}
	victim := "n3"
	var onVictim []string
	for name, n := range placed {
		if n == victim {
			onVictim = append(onVictim, name)
		}
	}
	t.Logf("placed: %d ledgers on %s", len(onVictim), victim)
	if len(onVictim) == 0 {
		t.Fatalf("no ledger placed on %s: %v", victim, placed)
	}

	// 8 clients: each appends to the ledgers in turn, routing by the
	// Router, and retries an event (with its idempotency key) after
	// Forget until it is acknowledged.
	var mu sync.Mutex
	acked := map[string]eventid.ID{} // key → ID
	var stop = make(chan struct{})
	var clients sync.WaitGroup
	var retries, afterKill sync.Map
	var killedAt time.Time
	for c := range 8 {
		clients.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ledger := fmt.Sprintf("ledger-%02d", (c*7+n)%ledgers)
				k := fmt.Sprintf("c%d-%d", c, n)
				deadline := time.Now().Add(30 * time.Second)
				for {
					o, err := router.Owner(ctx, ledger)
					var body string
					code := 0
					if err == nil {
						body, code, err = post(ctx, "POST", o.Address+"/append?ledger="+url.QueryEscape(ledger)+"&key="+k, fmt.Sprintf(`{"c":%d,"n":%d}`, c, n))
					}
					if err == nil && code == 200 {
						id, perr := eventid.Parse(body)
						if perr != nil {
							t.Errorf("append %s: answer %q: %v", k, body, perr)
							return
						}
						mu.Lock()
						acked[k] = id
						if !killedAt.IsZero() {
							afterKill.Store(ledger, true)
						}
						mu.Unlock()
						break
					}
					retries.Store(k, fmt.Sprint(code, " ", body, " ", err))
					if time.Now().After(deadline) {
						t.Errorf("append %s to %s: no node took it within 30 s: %d %s %v", k, ledger, code, body, err)
						return
					}
					router.Forget(ledger)
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	killedAt = time.Now()
	before := len(acked)
	mu.Unlock()
	nodes[victim].cmd.Process.Signal(syscall.SIGKILL)
	nodes[victim].cmd.Wait()
	// Until every ledger of the victim took an append on its new owner.
	deadline := time.Now().Add(40 * time.Second)
	for {
		missing := 0
		for _, name := range onVictim {
			if _, ok := afterKill.Load(name); !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) || t.Failed() {
			close(stop)
			clients.Wait()
			t.Fatalf("%d of %s's %d ledgers took no append 40 s after it was killed", missing, victim, len(onVictim))
		}
		time.Sleep(100 * time.Millisecond)
	}
	tookOver := time.Since(killedAt)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	clients.Wait()
	nRetries := 0
	retries.Range(func(_, _ any) bool { nRetries++; return true })
	t.Logf("%d events acknowledged (%d before the kill); every ledger of %s appended to on its new owner %v after the kill; %d events retried", len(acked), before, victim, tookOver.Round(time.Millisecond), nRetries)
	if t.Failed() {
		return
	}

	// Every acknowledged event on its ledger's owner now.
	if err := router.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for k, id := range acked {
		o, err := router.OwnerOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if o.Node == victim {
			t.Fatalf("event %s (%s): its ledger %s is still owned by the killed node", k, id, o.Name)
		}
		if body, code, err := post(ctx, "GET", o.Address+"/get?id="+id.String(), ""); err != nil || code != 200 {
			t.Fatalf("acknowledged event %s (%s) on %s, the owner of %s: %d %s %v", k, id, o.Node, o.Name, code, body, err)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		nodes[n].stop(t)
	}

	// One writer per epoch, in every ledger's manifests.
	loc, err := store.ParseLocation(replicaURL)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenS3(ctx, loc, store.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	bl, err := engine.InspectReplica(ctx, replicaURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(bl) != ledgers {
		t.Fatalf("the bucket holds %d ledgers", len(bl))
	}
	moved := 0
	for _, b := range bl {
		writers := map[uint64]string{}
		p, err := st.List(ctx, replica.LedgerPrefix(b.Ledger)+"manifest/", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			obj, err := st.Get(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			m, err := replica.DecodeManifest(o.Key, b.Ledger, obj.Data)
			if err != nil {
				t.Fatal(err)
			}
			if w, ok := writers[m.Epoch]; ok && w != m.Writer.Nonce {
				t.Fatalf("ledger %s: epoch %d has two writers (%s and %s)", b.Name, m.Epoch, w, m.Writer)
			}
			writers[m.Epoch] = m.Writer.Nonce
		}
		if b.Epoch > 1 {
			moved++
		}
	}
	if moved < len(onVictim) {
		t.Fatalf("%d ledgers of the bucket are past epoch 1, %d were on the killed node", moved, len(onVictim))
	}

	// A restore of the bucket holds every acknowledged event.
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := engine.Restore(ctx, restored, engine.RestoreOptions{Replica: replicaURL, Options: &engine.Options{SigningKeyFile: key}}); err != nil {
		t.Fatal(err)
	}
	rdb, err := engine.OpenReadOnly(restored, &engine.Options{SigningKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	for k, id := range acked {
		if _, err := rdb.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged event %s (%s) not in the restore: %v", k, id, err)
		}
	}
	rdb.Close()

	// A follower of the bucket: every ledger at the bucket's signed
	// checkpoint.
	pub, err := os.ReadFile(strings.TrimSuffix(key, ".key") + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	fw, err := engine.OpenFollower(t.TempDir(), engine.FollowerOptions{Replica: replicaURL, VerifierKey: strings.TrimSpace(string(pub)), PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	for _, b := range bl {
		obj, err := st.Get(ctx, replica.CheckpointKey(b.Ledger))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, cerr := fw.DB().LatestCheckpoint(b.Name)
			info, ierr := fw.DB().Ledger(b.Name)
			if cerr == nil && ierr == nil && bytes.Equal(c.Note, obj.Data) && info.Count == c.Size && info.Count == b.Stored {
				break
			}
			if time.Now().After(deadline) {
				s, _ := fw.Status(b.Name)
				t.Fatalf("follower of %s: checkpoint %v (%v), %d events (%v); the bucket holds %d events: %+v", b.Name, c.Size, cerr, info.Count, ierr, b.Stored, s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestVersityGWCommandReplicaOwners: annal replica owners lists the
// nodes of the bucket, alive or not as it saw their leases over one
// lease (a closed node's lease does not change), and the node and epoch
// of each ledger.
func TestVersityGWCommandReplicaOwners(t *testing.T) {
	credentialsInEnvironment(t, secret)
	bin := annalBinary(t)
	ctx := context.Background()
	replicaURL := fmt.Sprintf("s3://%s/owners%d?endpoint=%s&region=us-east-1&path-style=true", bucket, prefixes.Add(1), endpoint)
	key := filepath.Join(t.TempDir(), "nodes.key")
	open := func(name string) *engine.DB {
		db, err := engine.Open(t.TempDir(), &engine.Options{Replica: replicaURL, SigningKeyFile: key,
			Node: engine.Node{Name: name, Address: "http://" + name}, NodeLease: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	a := open("alpha")
	defer a.Close()
	if _, err := a.CreateLedger(ctx, engine.LedgerSpec{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	b := open("beta")
	if _, err := b.CreateLedger(ctx, engine.LedgerSpec{Name: "refunds"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBin(t, bin, "", "--replica", replicaURL, "--format", "ndjson", "replica", "owners")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{
		`"name":"alpha","address":"http://alpha","leaseSeconds":0.6,`, `"alive":true`,
		`"name":"beta","address":"http://beta","leaseSeconds":0.6,`, `"alive":false`,
		`"name":"orders",`, `"node":"alpha","address":"http://alpha","epoch":1,"nodeAlive":true}`,
		`"name":"refunds",`, `"node":"beta","address":"http://beta","epoch":1,"nodeAlive":false}`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("replica owners: no %s in\n%s", want, out)
		}
	}
	code, out, errOut = runBin(t, bin, "", "--replica", replicaURL, "--format", "table", "replica", "owners", "--watch", "0")
	if code != 0 || !strings.Contains(out, "LEDGER") || !strings.Contains(out, "refunds") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
}
