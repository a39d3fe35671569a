package cosign

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/annal-db/annal/engine/internal/dirlock"
	"github.com/annal-db/annal/engine/tree"
	"golang.org/x/mod/sumdb/note"
)

// The files of a witness's directory.
const (
	// KeyFile holds the witness's private key (ParseKey's line), 0600.
	KeyFile = "witness.key"
	// StateFile holds, per origin, the size and root it cosigned last:
	// one line "<origin> <size> <root in standard base64>" per origin,
	// sorted by origin, replaced whole (a temporary file written and
	// synced, renamed over it, the directory synced) before a
	// cosignature that moves it on is answered. It is created, empty,
	// with the key: a witness whose key is there and its state file not
	// is refused at start.
	StateFile = "witness.state"
	// LogFile is the witness's second record of what it cosigned: one
	// line "<origin> <size> <root>" (StateFile's form) for each
	// cosignature that moved its state on, appended and synced after
	// StateFile is replaced and before the answer. At start the state
	// must hold, for each origin, at least the log's last line: a state
	// file older than the log (put back alone from an old copy) is
	// refused, since the witness would cosign a fork of what it cosigned
	// since. A state one line ahead (a crash between the two writes) is
	// written to the log. Created, empty, with the key and the state; it
	// is rewritten to the state's lines once larger than
	// logCompactBytes.
	LogFile = "witness.log"
	// lockFile is flocked by the witness that runs on the directory.
	lockFile = "witness.lock"
)

// maxRequest bounds an add-checkpoint request: 63 proof lines of 45
// bytes and a checkpoint of a few hundred bytes with its signatures.
const maxRequest = 64 << 10

// logCompactBytes is the size past which LogFile is rewritten to the
// state's lines (when also 4 times the state's size): one line per
// origin, as many as the state.
const logCompactBytes = 1 << 20

// maxProofLines is the most consistency proof lines a request may hold.
const maxProofLines = 63

// WitnessOptions configures a Witness.
type WitnessOptions struct {
	// Name is the name of the witness's key when OpenWitness creates it
	// ("" means "annal-witness-" and 8 hex digits of its public key). An
	// existing key keeps its name.
	Name string
	// Logs are the verifier keys of the logs it cosigns for (annal key
	// prints a data directory's). A log key named N vouches for the
	// origins N (a C2SP log) and N/<8 hex digits> (an annal ledger's: its
	// key name and its ledger ID); any other origin is unknown (404).
	Logs []string
	// Log, if set, receives one line per request refused.
	Log *log.Logger
}

// Witness is a C2SP tlog witness: it cosigns a log's checkpoint only as a
// consistent extension of the last checkpoint it cosigned for its origin
// (or the first it is shown), and keeps what it cosigned in its
// directory (StateFile), durably, before it answers. Requests are served
// one at a time for the whole state (the check of the old size and the
// update of the state are one step), so two racing for one origin
// serialize. A Witness is an http.Handler of POST /add-checkpoint.
type Witness struct {
	dir  string
	key  *Key
	logs map[string]note.Verifier // by key name
	log  *log.Logger
	lock io.Closer

	mu    sync.Mutex
	state map[string]tree.Checkpoint // by origin; Size > 0
	// logFile is LogFile, open for appends, of logSize bytes.
	logFile *os.File
	logSize int64
	// broken is set when a write of the state failed: the file may hold
	// what the memory does not, and nothing is cosigned until a restart
	// reads it again.
	broken error
}

// OpenWitness opens the witness of the directory dir (created, 0700, if
// missing): its key (KeyFile, created on first use) and its state
// (StateFile). The directory is locked while the witness is open: a
// second witness on it is refused. Close releases it.
func OpenWitness(dir string, opts WitnessOptions) (*Witness, error) {
	if len(opts.Logs) == 0 {
		return nil, fmt.Errorf("cosign: a witness needs the key of at least one log")
	}
	w := &Witness{dir: dir, logs: map[string]note.Verifier{}, log: opts.Log}
	for _, k := range opts.Logs {
		v, err := tree.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("%w: log key %q: %v", ErrKey, k, err)
		}
		if _, dup := w.logs[v.Name()]; dup {
			return nil, fmt.Errorf("%w: two log keys named %s", ErrKey, v.Name())
		}
		w.logs[v.Name()] = v
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cosign: the witness directory: %w", err)
	}
	lock, err := dirlock.LockFile(filepath.Join(dir, lockFile), 0)
	if err != nil {
		return nil, fmt.Errorf("cosign: the witness directory %s is held by another witness: %w", dir, err)
	}
	w.lock = lock
	fail := func(err error) (*Witness, error) {
		lock.Close()
		return nil, err
	}
	if w.key, err = loadOrCreateKey(dir, opts.Name); err != nil {
		return fail(err)
	}
	if w.state, err = readState(filepath.Join(dir, StateFile)); err != nil {
		return fail(err)
	}
	if w.logFile, w.logSize, err = openLog(dir, w.state); err != nil {
		return fail(err)
	}
	return w, nil
}

// Close releases the witness's directory.
func (w *Witness) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.logFile.Close()
	if lerr := w.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// VerifierKey returns the witness's verifier key, for the logs and the
// verifiers that trust it.
func (w *Witness) VerifierKey() string { return w.key.VerifierKey() }

// Cosigned returns the checkpoint body (origin, size, root) the witness
// cosigned last for origin, if any.
func (w *Witness) Cosigned(origin string) (tree.Checkpoint, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.state[origin]
	return c, ok
}

// RequestError is an add-checkpoint refused: the HTTP status, and for 409
// Conflict the size the witness cosigned last.
type RequestError struct {
	Status int
	Size   uint64 // 409: the witness's size for the origin
	Reason string
}

// Error says the status, the witness's size for a 409, and why.
func (e *RequestError) Error() string {
	s := fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	if e.Status == http.StatusConflict {
		s += fmt.Sprintf(" (it cosigned size %d last)", e.Size)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes a RequestError match ErrRefused.
func (e *RequestError) Is(target error) bool { return target == ErrRefused }

func refused(status int, format string, a ...any) *RequestError {
	return &RequestError{Status: status, Reason: fmt.Sprintf(format, a...)}
}

// ServeHTTP serves POST /add-checkpoint (C2SP tlog-witness).
func (w *Witness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/add-checkpoint" {
		http.NotFound(rw, r)
		return
	}
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		http.Error(rw, "add-checkpoint takes POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil {
		http.Error(rw, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	line, err := w.AddCheckpoint(body)
	var re *RequestError
	switch {
	case err == nil:
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.Write(line)
	case errors.As(err, &re) && re.Status == http.StatusConflict:
		w.logf("add-checkpoint from %s: %v", r.RemoteAddr, err)
		rw.Header().Set("Content-Type", "text/x.tlog.size")
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", re.Size)
	case errors.As(err, &re):
		w.logf("add-checkpoint from %s: %v", r.RemoteAddr, err)
		http.Error(rw, re.Reason, re.Status)
	default:
		w.logf("add-checkpoint from %s: %v", r.RemoteAddr, err)
		http.Error(rw, err.Error(), http.StatusInternalServerError)
	}
}

func (w *Witness) logf(format string, a ...any) {
	if w.log != nil {
		w.log.Printf(format, a...)
	}
}

// AddCheckpoint serves one add-checkpoint request body (see the package
// comment): it returns the cosignature line, or a *RequestError saying
// why not (another error: the state could not be written, nothing
// cosigned).
func (w *Witness) AddCheckpoint(body []byte) ([]byte, error) {
	old, proof, msg, rerr := parseRequest(body)
	if rerr != nil {
		return nil, rerr
	}
	// The text a signed note signs ends at its last empty line.
	text := msg[:bytes.LastIndex(msg, []byte("\n\n"))+1]
	unchecked, err := tree.ParseCheckpoint(text)
	if err != nil {
		return nil, refused(http.StatusBadRequest, "the checkpoint: %v", err)
	}
	v := w.logKey(unchecked.Origin)
	if v == nil {
		return nil, refused(http.StatusNotFound, "origin %s: no log key of this witness vouches for it", unchecked.Origin)
	}
	c, err := tree.OpenCheckpoint(msg, v)
	if err != nil {
		return nil, refused(http.StatusForbidden, "origin %s: %v", unchecked.Origin, err)
	}
	if old > c.Size {
		return nil, refused(http.StatusBadRequest, "old size %d is above the checkpoint's size %d", old, c.Size)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return nil, fmt.Errorf("cosign: the witness cosigns nothing until it is restarted: %w", w.broken)
	}
	cur := w.state[c.Origin]
	if old != cur.Size {
		return nil, &RequestError{Status: http.StatusConflict, Size: cur.Size, Reason: fmt.Sprintf("origin %s: old size %d, the witness cosigned size %d last", c.Origin, old, cur.Size)}
	}
	switch {
	case c.Size == 0 && c.Root != tree.Hash(sha256.Sum256(nil)):
		return nil, refused(http.StatusUnprocessableEntity, "origin %s: size 0 with a root other than the empty tree's", c.Origin)
	case old == 0:
		if len(proof) != 0 {
			return nil, refused(http.StatusUnprocessableEntity, "origin %s: old size 0 takes no proof, the request holds %d hashes", c.Origin, len(proof))
		}
	case old == c.Size:
		if c.Root != cur.Root || len(proof) != 0 {
			return nil, refused(http.StatusUnprocessableEntity, "origin %s: size %d was cosigned with root %s, this checkpoint's is %s: not the same tree",
				c.Origin, c.Size, b64(cur.Root), b64(c.Root))
		}
	default:
		if err := tree.VerifyConsistency(old, c.Size, cur.Root, c.Root, proof); err != nil {
			return nil, refused(http.StatusUnprocessableEntity, "origin %s: size %d root %s is not a consistent extension of size %d root %s, cosigned before: %v",
				c.Origin, c.Size, b64(c.Root), old, b64(cur.Root), err)
		}
	}
	if c.Size > cur.Size {
		next := make(map[string]tree.Checkpoint, len(w.state)+1)
		for o, s := range w.state {
			next[o] = s
		}
		next[c.Origin] = c
		if err := writeState(w.dir, next); err != nil {
			w.broken = err
			return nil, fmt.Errorf("cosign: the witness's state: %w", err)
		}
		w.state = next
		if err := w.appendLog(c); err != nil {
			w.broken = err
			return nil, fmt.Errorf("cosign: the witness's log: %w", err)
		}
	}
	return w.key.cosignatureLine(text)
}

// logKey returns the log key that vouches for origin, or nil.
func (w *Witness) logKey(origin string) note.Verifier {
	if v, ok := w.logs[origin]; ok {
		return v
	}
	i := strings.LastIndexByte(origin, '/')
	if i < 0 || !ledgerIDText(origin[i+1:]) {
		return nil
	}
	return w.logs[origin[:i]]
}

// ledgerIDText says whether s is a ledger ID as an origin ends with: 8
// lower-case hex digits.
func ledgerIDText(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// parseRequest parses an add-checkpoint body: "old N", proof lines, an
// empty line, the signed checkpoint.
func parseRequest(body []byte) (old uint64, proof []tree.Hash, msg []byte, err *RequestError) {
	if len(body) > maxRequest {
		return 0, nil, nil, refused(http.StatusBadRequest, "the request is larger than %d bytes", maxRequest)
	}
	line, rest, ok := bytes.Cut(body, []byte("\n"))
	if !ok {
		return 0, nil, nil, refused(http.StatusBadRequest, "no old size line")
	}
	n, found := strings.CutPrefix(string(line), "old ")
	if !found || !decimal(n) {
		return 0, nil, nil, refused(http.StatusBadRequest, "the first line %q is not \"old\" and a size in decimal", line)
	}
	old, perr := strconv.ParseUint(n, 10, 64)
	if perr != nil {
		return 0, nil, nil, refused(http.StatusBadRequest, "old size %q: %v", n, perr)
	}
	for i := 1; ; i++ {
		line, rest, ok = bytes.Cut(rest, []byte("\n"))
		if !ok {
			return 0, nil, nil, refused(http.StatusBadRequest, "no empty line before the checkpoint")
		}
		if len(line) == 0 {
			break
		}
		if i > maxProofLines {
			return 0, nil, nil, refused(http.StatusBadRequest, "more than %d consistency proof lines", maxProofLines)
		}
		h, derr := base64.StdEncoding.Strict().DecodeString(string(line))
		if derr != nil || len(h) != len(tree.Hash{}) {
			return 0, nil, nil, refused(http.StatusBadRequest, "proof line %d is not a 32-byte hash in base64", i)
		}
		proof = append(proof, tree.Hash(h))
	}
	if !bytes.Contains(rest, []byte("\n\n")) {
		return 0, nil, nil, refused(http.StatusBadRequest, "the checkpoint is not a signed note")
	}
	return old, proof, rest, nil
}

// decimal says whether s is a decimal number without leading zeros.
func decimal(s string) bool {
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func b64(h tree.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }

// WitnessKey returns the key of the witness directory dir (KeyFile),
// creating it (and dir, 0700) with a new key named name if there is none:
// what annal witness --print-key prints.
func WitnessKey(dir, name string) (*Key, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cosign: the witness directory: %w", err)
	}
	return loadOrCreateKey(dir, name)
}

// loadOrCreateKey reads dir/KeyFile, or creates it with a new key named
// name.
func loadOrCreateKey(dir, name string) (*Key, error) {
	path := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("cosign: %w", err)
		}
		if info.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: %s has mode %04o: others can read the private key (chmod 600 it)", ErrKey, path, info.Mode().Perm())
		}
		k, err := ParseKey(strings.TrimSuffix(string(b), "\n"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return k, nil
	case errors.Is(err, os.ErrNotExist):
		k, err := GenerateKey(name)
		if err != nil {
			return nil, err
		}
		// The state file and the log come with the key, empty, before
		// it: from then on a missing one is a lost one (readState,
		// openLog).
		if _, err := os.Stat(filepath.Join(dir, StateFile)); errors.Is(err, os.ErrNotExist) {
			if err := writeState(dir, nil); err != nil {
				return nil, fmt.Errorf("cosign: the witness's state: %w", err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, LogFile)); errors.Is(err, os.ErrNotExist) {
			if err := writeFileAtomic(dir, LogFile, nil); err != nil {
				return nil, fmt.Errorf("cosign: the witness's log: %w", err)
			}
		}
		if err := writeFileAtomic(dir, KeyFile, []byte(k.PrivateKey()+"\n")); err != nil {
			return nil, fmt.Errorf("cosign: write the witness key: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("cosign: the witness key: %w", err)
	}
}

// readState reads a witness's state file. A missing one is an error: it
// is created, empty, with the key (loadOrCreateKey), so the witness ran
// before and its state was lost.
func readState(path string) (map[string]tree.Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cosign: the witness's state file %s is missing beside its key (restore it from a backup, the latest: without it the witness would cosign any history it is shown next; if this witness never cosigned a checkpoint, create it empty, mode 0600)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("cosign: the witness's state: %w", err)
	}
	state, err := tree.ParseCheckpointLines(b)
	if err != nil {
		return nil, fmt.Errorf("cosign: the witness's state file %s, %v (restore it from a backup: without it the witness would cosign any history it is shown next)", path, err)
	}
	return state, nil
}

// openLog reads dir/LogFile and checks it against the state (LogFile
// says what is refused), writes to it the state's lines that are ahead
// of it, and returns it open for appends, and its size.
func openLog(dir string, state map[string]tree.Checkpoint) (*os.File, int64, error) {
	path := filepath.Join(dir, LogFile)
	statePath := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if len(state) > 0 {
			return nil, 0, fmt.Errorf("cosign: the witness's log %s is missing beside its state %s, which holds %d origins: it was deleted, or this directory was last used by a witness without a log (then create it from the state: cp %s %s)", path, statePath, len(state), statePath, path)
		}
		// A witness that never cosigned, from before the log.
		if err := writeFileAtomic(dir, LogFile, nil); err != nil {
			return nil, 0, fmt.Errorf("cosign: the witness's log: %w", err)
		}
		b = nil
	} else if err != nil {
		return nil, 0, fmt.Errorf("cosign: the witness's log: %w", err)
	}
	// A last line without its newline is an append that a crash cut
	// before its sync: nothing was answered after it.
	keep := bytes.LastIndexByte(b, '\n') + 1
	last := map[string]tree.Checkpoint{}
	for i, line := range bytes.SplitAfter(b[:keep], []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		one, err := tree.ParseCheckpointLines(line)
		if err != nil {
			return nil, 0, fmt.Errorf("cosign: the witness's log %s, line %d: %v", path, i+1, err)
		}
		for _, c := range one {
			if p, ok := last[c.Origin]; ok && c.Size <= p.Size {
				return nil, 0, fmt.Errorf("cosign: the witness's log %s, line %d: origin %s size %d after size %d: a witness's sizes only grow", path, i+1, c.Origin, c.Size, p.Size)
			}
			last[c.Origin] = c
		}
	}
	var ahead []byte
	for _, o := range slices.Sorted(maps.Keys(last)) {
		l := last[o]
		st, ok := state[o]
		switch {
		case !ok || st.Size < l.Size:
			return nil, 0, fmt.Errorf("cosign: the witness's state %s is older than its log %s: origin %s, the state holds size %d, the log says the witness cosigned size %d (root %s): the state file was put back from an old copy or replaced; started so, the witness would cosign a fork of what it cosigned since. Put back its latest copy, or write it from the log (for each origin its last line, sorted by origin)",
				statePath, path, o, st.Size, l.Size, b64(l.Root))
		case st.Size == l.Size && st.Root != l.Root:
			return nil, 0, fmt.Errorf("cosign: the witness's state %s and its log %s disagree: origin %s size %d, root %s in the state, %s in the log", statePath, path, o, l.Size, b64(st.Root), b64(l.Root))
		}
	}
	for _, o := range slices.Sorted(maps.Keys(state)) {
		if l, ok := last[o]; !ok || state[o].Size > l.Size {
			ahead = tree.AppendCheckpointLines(ahead, map[string]tree.Checkpoint{o: state[o]})
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("cosign: the witness's log: %w", err)
	}
	size := int64(keep)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("cosign: the witness's log: %w", err)
	}
	if len(ahead) > 0 || keep != len(b) {
		// The state's lines ahead: a crash between the state's write and
		// the log's (or a log put back from an old copy: the state, newer,
		// is what the witness goes by).
		_, err := f.Write(ahead)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("cosign: the witness's log %s: %w", path, err)
		}
		size += int64(len(ahead))
	}
	return f, size, nil
}

// appendLog appends c to the log, synced; past logCompactBytes the log
// is rewritten to the state's lines.
func (w *Witness) appendLog(c tree.Checkpoint) error {
	line := tree.AppendCheckpointLines(nil, map[string]tree.Checkpoint{c.Origin: c})
	if _, err := w.logFile.Write(line); err != nil {
		return err
	}
	if err := w.logFile.Sync(); err != nil {
		return err
	}
	w.logSize += int64(len(line))
	all := tree.AppendCheckpointLines(nil, w.state)
	if w.logSize <= logCompactBytes || w.logSize <= 4*int64(len(all)) {
		return nil
	}
	if err := writeFileAtomic(w.dir, LogFile, all); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(w.dir, LogFile), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w.logFile.Close()
	w.logFile, w.logSize = f, int64(len(all))
	return nil
}

// writeState replaces dir/StateFile with state, durably.
func writeState(dir string, state map[string]tree.Checkpoint) error {
	b := tree.AppendCheckpointLines(nil, state)
	return writeFileAtomic(dir, StateFile, b)
}

// writeFileAtomic writes data to dir/name (0600) through dir/name.tmp:
// written, synced, renamed, the directory synced.
func writeFileAtomic(dir, name string, data []byte) error {
	path, tmp := filepath.Join(dir, name), filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
