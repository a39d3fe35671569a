// Package bench holds the workloads that measure annal against its peers.
// The benchmarks (go test -bench) and the segbench command
// (go run ./cmd/segbench) run the same functions, so their figures agree.
//
// The segment workloads (issue 3) compare annal's segment log with
// github.com/tidwall/wal, a plain write-ahead log, writing the same bytes
// per record with the same sync policy: see WALRecord.
package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/annal-db/annal/eventid"
	"github.com/annal-db/annal/segment"
	"github.com/tidwall/wal"
)

// BatchSize is the number of records of one batch in the batch workloads.
const BatchSize = 1000

// SegmentSize is the segment size of both logs: annal's default, and
// tidwall/wal is set to it (its own default is 20 MB) so that both rotate
// equally often.
const SegmentSize = 64 << 20

// GenesisEntry is the first event of the benchmark ledger; the ledger ID is
// derived from it (see Ledger).
var GenesisEntry = segment.Entry{Entity: "ledger", Key: "bench", Event: "ledger-created", Meta: []byte(`{"actor":"bench"}`), Data: []byte(`{"name":"bench"}`)}

// Ledger returns the ID of the benchmark ledger: the LedgerID of its
// genesis entry.
func Ledger() eventid.LedgerID {
	c := eventid.Content{Entity: GenesisEntry.Entity, Key: GenesisEntry.Key, Event: GenesisEntry.Event, Meta: GenesisEntry.Meta, Data: GenesisEntry.Data}
	return c.LedgerID()
}

// Entry returns a realistic event of about 250 bytes once framed, of the
// same shape as segment's tests. Meta and Data are canonical JSON (sorted
// keys, compact).
func Entry(i int) segment.Entry {
	return segment.Entry{
		Entity: "order",
		Key:    fmt.Sprintf("order-%d", i%300),
		Event:  "order-placed",
		Meta:   []byte(fmt.Sprintf(`{"actor":"user-%d","cause":"req-%08d","source":"web"}`, i%50, i)),
		Data:   []byte(fmt.Sprintf(`{"currency":"EUR","items":[{"qty":%d,"sku":"sku-%d"}],"note":"some words to make it realistic","total":%d.5}`, i%7+1, i%1000, i)),
	}
}

// PoolSize is the number of distinct entries a workload cycles through, so
// that making entries is not part of what is measured. A multiple of
// BatchSize.
const PoolSize = 10 * BatchSize

// Pool is the entries of a workload and the same records for tidwall/wal.
type Pool struct {
	Entries []segment.Entry
	Records [][]byte // Records[i] is WALRecord(Entries[i], i)
}

var (
	poolOnce sync.Once
	pool     *Pool
)

// GetPool returns the shared pool of PoolSize entries (built once).
func GetPool() *Pool {
	poolOnce.Do(func() {
		p := &Pool{Entries: make([]segment.Entry, PoolSize), Records: make([][]byte, PoolSize)}
		for i := range p.Entries {
			p.Entries[i] = Entry(i)
			p.Records[i] = WALRecord(p.Entries[i], uint64(i))
		}
		pool = p
	})
	return pool
}

// Annal's record layout, from segment/doc.go: a 12-byte frame header and a
// 56-byte fixed payload part before the strings and JSON.
const (
	annalFrameHeader  = 12
	annalPayloadFixed = 56
)

// FrameLen is the size in bytes of e's record frame in an annal segment
// (segment/doc.go: 12 + 56 + entity, key, event, meta and data).
func FrameLen(e segment.Entry) int {
	return annalFrameHeader + annalPayloadFixed + len(e.Entity) + len(e.Key) + len(e.Event) + len(e.Meta) + len(e.Data)
}

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

// WALRecord returns the record that tidwall/wal writes for e: a header of
// the lengths and sequence number (zero-padded where annal has its CRC,
// IDs and synced offset, which tidwall/wal does not compute) followed by
// entity, key, event, meta and data concatenated. Its size is chosen so
// that the bytes tidwall/wal puts on disk for it (a uvarint length and the
// record, in its Binary format) equal annal's frame for e: both logs write
// exactly the same number of bytes per record, the same content bytes,
// and only annal checksums them.
func WALRecord(e segment.Entry, seq uint64) []byte {
	content := len(e.Entity) + len(e.Key) + len(e.Event) + len(e.Meta) + len(e.Data)
	total := FrameLen(e)
	n := total - 1
	for n+uvarintLen(uint64(n)) > total {
		n--
	}
	b := make([]byte, n)
	h := b[:n-content]
	if len(h) >= 30 {
		binary.BigEndian.PutUint32(h[0:], uint32(n))
		binary.BigEndian.PutUint16(h[4:], uint16(len(e.Entity)))
		binary.BigEndian.PutUint16(h[6:], uint16(len(e.Key)))
		binary.BigEndian.PutUint16(h[8:], uint16(len(e.Event)))
		binary.BigEndian.PutUint32(h[10:], uint32(len(e.Meta)))
		binary.BigEndian.PutUint32(h[14:], uint32(len(e.Data)))
		binary.BigEndian.PutUint64(h[18:], seq)
	}
	p := b[n-content:]
	p = p[copy(p, e.Entity):]
	p = p[copy(p, e.Key):]
	p = p[copy(p, e.Event):]
	p = p[copy(p, e.Meta):]
	copy(p, e.Data)
	return b
}

// WALDiskLen is the bytes tidwall/wal writes for record r (Binary format:
// uvarint length, then the record).
func WALDiskLen(r []byte) int { return uvarintLen(uint64(len(r))) + len(r) }

// CreateAnnal creates an annal ledger in dir on the real file system with
// the given durability and segment size (0: SegmentSize) and appends its
// genesis entry.
func CreateAnnal(dir string, d segment.Durability, segSize int64) (*segment.Log, error) {
	if segSize == 0 {
		segSize = SegmentSize
	}
	l, err := segment.Create(dir, segment.Options{Ledger: Ledger(), Durability: d, SegmentSize: segSize})
	if err != nil {
		return nil, err
	}
	if err := l.Append(&segment.Batch{Entries: []segment.Entry{GenesisEntry}}); err != nil {
		l.Close()
		return nil, fmt.Errorf("genesis: %w", err)
	}
	return l, nil
}

// OpenWAL opens a tidwall/wal log in dir that fsyncs every Write and
// WriteBatch (NoSync: false, its default), with SegmentSize segments.
func OpenWAL(dir string) (*wal.Log, error) {
	o := *wal.DefaultOptions
	o.NoSync = false
	o.SegmentSize = SegmentSize
	return wal.Open(dir, &o)
}

// Result is what one run of a workload did.
type Result struct {
	Records int64         // records appended (or verified)
	Bytes   int64         // bytes of those records on disk
	Syncs   int64         // fsyncs (annal: from Stats; tidwall/wal: one per call)
	Elapsed time.Duration // wall time of the workload alone
}

// RecordsPerSec returns the throughput in records per second.
func (r Result) RecordsPerSec() float64 { return float64(r.Records) / r.Elapsed.Seconds() }

// MBPerSec returns the throughput in 10^6 bytes per second.
func (r Result) MBPerSec() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

// RecordsPerSync returns how many records shared an fsync.
func (r Result) RecordsPerSync() float64 {
	if r.Syncs == 0 {
		return 0
	}
	return float64(r.Records) / float64(r.Syncs)
}

// statsDelta fills a Result from the change of a Log's Stats.
func statsDelta(before, after segment.Stats, elapsed time.Duration) Result {
	return Result{Records: after.Records - before.Records, Bytes: after.Bytes - before.Bytes, Syncs: after.Syncs - before.Syncs, Elapsed: elapsed}
}

// AnnalBatches appends batches of BatchSize records to l, each with the
// Log's durability (Sync: one fsync per batch).
func AnnalBatches(l *segment.Log, p *Pool, batches int) (Result, error) {
	before := l.Stats()
	start := time.Now()
	b := &segment.Batch{}
	for i := range batches {
		j := (i * BatchSize) % PoolSize
		b.Entries = p.Entries[j : j+BatchSize]
		if err := l.Append(b); err != nil {
			return Result{}, fmt.Errorf("annal batch %d: %w", i, err)
		}
	}
	return statsDelta(before, l.Stats(), time.Since(start)), nil
}

// WALBatches writes batches of BatchSize records to w with WriteBatch (one
// fsync per batch).
func WALBatches(w *wal.Log, p *Pool, batches int) (Result, error) {
	last, err := w.LastIndex()
	if err != nil {
		return Result{}, err
	}
	var r Result
	start := time.Now()
	var b wal.Batch
	for i := range batches {
		j := (i * BatchSize) % PoolSize
		for _, rec := range p.Records[j : j+BatchSize] {
			last++
			b.Write(last, rec)
			r.Bytes += int64(WALDiskLen(rec))
		}
		if err := w.WriteBatch(&b); err != nil {
			return Result{}, fmt.Errorf("tidwall/wal batch %d: %w", i, err)
		}
		r.Syncs++
	}
	r.Elapsed = time.Since(start)
	r.Records = int64(batches) * BatchSize
	return r, nil
}

// AnnalSingles appends n records to l one per Append, from one goroutine.
func AnnalSingles(l *segment.Log, p *Pool, n int) (Result, error) {
	return AnnalConcurrent(l, p, n, 1)
}

// WALSingles writes n records to w one per Write (one fsync each).
func WALSingles(w *wal.Log, p *Pool, n int) (Result, error) {
	last, err := w.LastIndex()
	if err != nil {
		return Result{}, err
	}
	var r Result
	start := time.Now()
	for i := range n {
		rec := p.Records[i%PoolSize]
		last++
		if err := w.Write(last, rec); err != nil {
			return Result{}, fmt.Errorf("tidwall/wal write %d: %w", i, err)
		}
		r.Bytes += int64(WALDiskLen(rec))
	}
	r.Elapsed = time.Since(start)
	r.Records, r.Syncs = int64(n), int64(n)
	return r, nil
}

// AnnalConcurrent appends n records to l, one per Append, from g
// goroutines that take the next record number from a shared counter.
// Group commit lets concurrent appends share a write and an fsync.
func AnnalConcurrent(l *segment.Log, p *Pool, n, g int) (Result, error) {
	before := l.Stats()
	elapsed, _, err := fanOut(n, g, func() func(i int64) (int64, error) {
		b := &segment.Batch{Entries: make([]segment.Entry, 1)}
		return func(i int64) (int64, error) {
			b.Entries[0] = p.Entries[i%PoolSize]
			if err := l.Append(b); err != nil {
				return 0, fmt.Errorf("annal append %d: %w", i, err)
			}
			return 0, nil
		}
	})
	if err != nil {
		return Result{}, err
	}
	return statsDelta(before, l.Stats(), elapsed), nil
}

// WALConcurrentMutex writes n records to w, one per Write, from g
// goroutines. tidwall/wal's Write takes an internal lock, but each Write
// must carry the index LastIndex()+1 (else ErrOutOfOrder), so the
// goroutines must pick the index and write under one lock of their own:
// the writes, and their fsyncs, are serialized.
func WALConcurrentMutex(w *wal.Log, p *Pool, n, g int) (Result, error) {
	last, err := w.LastIndex()
	if err != nil {
		return Result{}, err
	}
	var mu sync.Mutex
	elapsed, bytes, err := fanOut(n, g, func() func(i int64) (int64, error) {
		return func(i int64) (int64, error) {
			rec := p.Records[i%PoolSize]
			mu.Lock()
			last++
			err := w.Write(last, rec)
			mu.Unlock()
			if err != nil {
				return 0, fmt.Errorf("tidwall/wal write %d: %w", i, err)
			}
			return int64(WALDiskLen(rec)), nil
		}
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Records: int64(n), Bytes: bytes, Syncs: int64(n), Elapsed: elapsed}, nil
}

// fanOut runs n operations on g goroutines in a closed loop: each
// goroutine gets its own operation from newOp and calls it with the next
// index until n are done or one fails. It returns the elapsed time, the
// sum of the byte counts the operations returned, and the first error.
func fanOut(n, g int, newOp func() func(i int64) (int64, error)) (time.Duration, int64, error) {
	var next, bytes atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Add(1)
		op := newOp()
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || firstErr.Load() != nil {
					return
				}
				b, err := op(i)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				bytes.Add(b)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return elapsed, 0, *e
	}
	return elapsed, bytes.Load(), nil
}

// BuildLedger creates a ledger of n records after the genesis in dir
// (appended in batches of BatchSize, durability None, synced by Close) and
// returns it reopened. segSize 0 means SegmentSize.
func BuildLedger(dir string, n int, segSize int64) (*segment.Log, error) {
	l, err := CreateAnnal(dir, segment.None, segSize)
	if err != nil {
		return nil, err
	}
	p := GetPool()
	b := &segment.Batch{}
	for i := 0; i < n; i += BatchSize {
		j := i % PoolSize
		b.Entries = p.Entries[j : j+min(BatchSize, n-i)]
		if err := l.Append(b); err != nil {
			l.Close()
			return nil, fmt.Errorf("build ledger at %d: %w", i, err)
		}
	}
	if err := l.Close(); err != nil {
		return nil, err
	}
	l, _, err = segment.Open(dir, segment.Options{Ledger: Ledger(), SegmentSize: segSize}, segment.Head{})
	return l, err
}

// LedgerBytes returns the size of the segment files of the ledger in dir.
func LedgerBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// AnnalVerify verifies every record of l (segment.Log.Verify).
func AnnalVerify(ctx context.Context, l *segment.Log) (Result, error) {
	var r Result
	start := time.Now()
	_, err := l.Verify(ctx, func(records, bytes int64) { r.Records, r.Bytes = records, bytes })
	r.Elapsed = time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("annal verify: %w", err)
	}
	return r, nil
}

// ReadCRC reads every file of dir and computes its CRC32C: the least work
// any verification of those bytes does (in one goroutine per file).
func ReadCRC(dir string) (Result, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return Result{}, err
	}
	var r Result
	start := time.Now()
	var wg sync.WaitGroup
	var bytes atomic.Int64
	var firstErr atomic.Pointer[error]
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, e := range ents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n, err := crcFile(filepath.Join(dir, e.Name()))
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
			bytes.Add(n)
		}()
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	if e := firstErr.Load(); e != nil {
		return Result{}, *e
	}
	r.Bytes = bytes.Load()
	return r, nil
}

func crcFile(name string) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	return io.CopyBuffer(h, f, make([]byte, 256<<10))
}

// FileAppender is the machine's limit for synced appends from one
// writer: a plain *os.File, appended to and fsynced record by record.
type FileAppender struct {
	f   *os.File
	rec []byte
}

// NewFileAppender creates a file in dir to append records of size bytes.
func NewFileAppender(dir string, size int) (*FileAppender, error) {
	f, err := os.CreateTemp(dir, "fsync-*.tmp")
	if err != nil {
		return nil, err
	}
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i)
	}
	return &FileAppender{f: f, rec: rec}, nil
}

// Append writes and fsyncs n records, one at a time.
func (a *FileAppender) Append(n int) (Result, error) {
	start := time.Now()
	for range n {
		if _, err := a.f.Write(a.rec); err != nil {
			return Result{}, err
		}
		if err := a.f.Sync(); err != nil {
			return Result{}, err
		}
	}
	return Result{Records: int64(n), Bytes: int64(n * len(a.rec)), Syncs: int64(n), Elapsed: time.Since(start)}, nil
}

// Close closes and removes the file.
func (a *FileAppender) Close() error {
	err := a.f.Close()
	if rerr := os.Remove(a.f.Name()); err == nil {
		err = rerr
	}
	return err
}

// FsyncBaseline appends n records of size bytes to a new FileAppender in
// dir, each fsynced.
func FsyncBaseline(dir string, n, size int) (Result, error) {
	a, err := NewFileAppender(dir, size)
	if err != nil {
		return Result{}, err
	}
	r, err := a.Append(n)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	return r, err
}

// Settle flushes the file system (sync(2)) and pauses briefly, so that the
// write-back and the freeing of files left by one workload (on a file
// system mounted with discard, deleting 64 MiB can delay the next fsyncs
// for a while) is not charged to the next one. Call it outside the timed
// part.
func Settle() {
	syscall.Sync()
	time.Sleep(100 * time.Millisecond)
}

// IdealGroup is the disk's limit for concurrent synced appends: a group
// commit with no encoding, checksums or bookkeeping, on a plain *os.File.
// Each writer reserves the next offset, pwrites its own record there
// (os.File.WriteAt) and waits for an fsync that started after its write
// completed; at most one fsync is in flight, as in annal. The first
// waiter that finds no fsync running runs the next one itself; the others
// wait on a sync.Cond.
//
// Which fsync covers a write: fsync makes durable every write that has
// completed when it is called, and none that is still running (a write
// racing with an fsync may or may not be covered). So the writer must
// wait for an fsync that started after its WriteAt returned. Fsyncs are
// numbered in the order they start (started, incremented under mu just
// before the syncer calls Sync), and, one at a time, complete in the same
// order (done is the number of the last completed one). A writer whose
// WriteAt has returned takes mu and reads started: every fsync numbered
// above it starts after this moment, hence after the write, and so covers
// it. The writer is durable once done >= started+1 (as read then). This
// needs no ordering of the writes among themselves: writes that complete
// out of order (a later offset first) are each covered by the first fsync
// that starts after their own completion, and no fsync is trusted for a
// write that was still running when it began, so there is no "durable up
// to offset" to get wrong.
type IdealGroup struct {
	f     *os.File
	buf   []byte // record i is buf[:sizes[i%PoolSize]]
	sizes []int  // FrameLen of the pool's entries: the bytes annal writes
	next  int    // record number of the next Run's first record
	end   atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond
	started int64 // fsyncs started; the number of the latest
	done    int64 // number of the latest completed fsync
	syncing bool  // an fsync is in flight
	err     error // the first failed fsync; sticky
}

// NewIdealGroup creates a file in dir for an ideal group commit of
// records of the sizes of annal's frames of the pool's entries.
func NewIdealGroup(dir string) (*IdealGroup, error) {
	f, err := os.CreateTemp(dir, "ideal-*.tmp")
	if err != nil {
		return nil, err
	}
	p := GetPool()
	a := &IdealGroup{f: f, sizes: make([]int, len(p.Entries))}
	size := 0
	for i, e := range p.Entries {
		a.sizes[i] = FrameLen(e)
		size = max(size, a.sizes[i])
	}
	a.buf = make([]byte, size)
	for i := range a.buf {
		a.buf[i] = byte(i)
	}
	a.cond = sync.NewCond(&a.mu)
	return a, nil
}

// Run appends n records from g goroutines in a closed loop, each record
// written and made durable before its goroutine takes the next.
func (a *IdealGroup) Run(n, g int) (Result, error) {
	base := a.next
	a.next += n
	a.mu.Lock()
	syncs := a.started
	a.mu.Unlock()
	elapsed, bytes, err := fanOut(n, g, func() func(i int64) (int64, error) {
		return func(i int64) (int64, error) {
			rec := a.buf[:a.sizes[(base+int(i))%len(a.sizes)]]
			off := a.end.Add(int64(len(rec))) - int64(len(rec))
			if _, err := a.f.WriteAt(rec, off); err != nil {
				return 0, err
			}
			if err := a.waitDurable(); err != nil {
				return 0, err
			}
			return int64(len(rec)), nil
		}
	})
	if err != nil {
		return Result{}, err
	}
	a.mu.Lock()
	syncs = a.started - syncs
	a.mu.Unlock()
	return Result{Records: int64(n), Bytes: bytes, Syncs: syncs, Elapsed: elapsed}, nil
}

// waitDurable returns once an fsync that started after the caller's
// completed write has finished (see IdealGroup), running it if no fsync
// is in flight.
func (a *IdealGroup) waitDurable() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	need := a.started + 1 // the first fsync to start from now on
	for a.done < need && a.err == nil {
		if a.syncing {
			a.cond.Wait()
			continue
		}
		a.syncing = true
		a.started++
		gen := a.started
		a.mu.Unlock()
		err := a.f.Sync()
		a.mu.Lock()
		a.syncing = false
		if err != nil {
			a.err = err
		} else {
			a.done = gen
		}
		a.cond.Broadcast()
	}
	return a.err
}

// Close closes and removes the file.
func (a *IdealGroup) Close() error {
	err := a.f.Close()
	if rerr := os.Remove(a.f.Name()); err == nil {
		err = rerr
	}
	return err
}

// IdealGroupCommit appends n records of annal's frame sizes (260 bytes on
// average) from g goroutines to a new IdealGroup in dir: the rate the disk
// allows a group commit, without annal's encoding and bookkeeping. With
// g = 1 it is one pwrite and one fsync per record.
func IdealGroupCommit(dir string, n, g int) (Result, error) {
	a, err := NewIdealGroup(dir)
	if err != nil {
		return Result{}, err
	}
	r, err := a.Run(n, g)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	return r, err
}
