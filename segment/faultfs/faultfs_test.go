package faultfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readFile returns the contents of name read from fs directly, so that the
// read is not an operation of any wrapper.
func readFile(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

// writeFile creates name on fs with data, synced.
func writeFile(t *testing.T, fs vfs.FS, name string, data string) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync %s: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", name, err)
	}
}

// must fails the test if err is not nil.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantInjected checks that err is an injected fault with the given errno
// and not the other one.
func wantInjected(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, ErrInjected) {
		t.Fatalf("err = %v, want it to match ErrInjected", err)
	}
	if !errors.Is(err, errno) {
		t.Fatalf("err = %v, want it to match %v", err, errno)
	}
	other := syscall.EIO
	if errno == syscall.EIO {
		other = syscall.ENOSPC
	}
	if errors.Is(err, other) {
		t.Fatalf("err = %v, must not match %v", err, other)
	}
}

func TestRecording(t *testing.T) {
	fs := Wrap(vfs.NewMem())
	must(t, fs.MkdirAll("/d", 0o755))
	f, err := fs.Create("/d/a", vfs.WriteCategoryUnspecified)
	must(t, err)
	_, err = f.Write([]byte("hello"))
	must(t, err)
	_, err = f.Write([]byte("world!"))
	must(t, err)
	_, err = f.WriteAt([]byte("HE"), 0)
	must(t, err)
	must(t, f.Preallocate(0, 4096))
	must(t, f.Sync())
	must(t, f.SyncData())
	_, err = f.SyncTo(11)
	must(t, err)
	must(t, f.Close())
	dir, err := fs.OpenDir("/d")
	must(t, err)
	must(t, dir.Sync())
	must(t, dir.Close())
	must(t, fs.Rename("/d/a", "/d/b"))
	r, err := fs.Open("/d/b")
	must(t, err)
	buf := make([]byte, 4)
	_, err = r.Read(buf)
	must(t, err)
	_, err = r.ReadAt(buf, 7)
	must(t, err)
	rest := make([]byte, 100)
	n, err := r.Read(rest)
	must(t, err)
	if got, want := string(buf)+"|"+string(rest[:n]), "rld!|oworld!"; got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
	if _, err := r.Read(rest); err != io.EOF {
		t.Fatalf("read at the end: %v, want io.EOF", err)
	}
	_, err = r.Stat()
	must(t, err)
	must(t, r.Close())
	_, err = fs.List("/d")
	must(t, err)
	_, err = fs.Stat("/d/b")
	must(t, err)
	must(t, fs.Link("/d/b", "/d/c"))
	must(t, fs.Remove("/d/c"))
	w, err := fs.ReuseForWrite("/d/b", "/d/e", vfs.WriteCategoryUnspecified)
	must(t, err)
	must(t, w.Close())
	lock, err := fs.Lock("/LOCK")
	must(t, err)
	must(t, lock.Close())
	must(t, fs.RemoveAll("/d"))
	_ = fs.PathJoin("/d", fs.PathBase("/d/x"), fs.PathDir("/d/x")) // not operations

	want := []Op{
		{Kind: MkdirAll, Path: "/d"},
		{Kind: Create, Path: "/d/a"},
		{Kind: Write, Path: "/d/a", Offset: 0, Len: 5},
		{Kind: Write, Path: "/d/a", Offset: 5, Len: 6},
		{Kind: WriteAt, Path: "/d/a", Offset: 0, Len: 2},
		{Kind: Preallocate, Path: "/d/a", Offset: 0, Len: 4096},
		{Kind: Sync, Path: "/d/a"},
		{Kind: Sync, Path: "/d/a"},
		{Kind: Sync, Path: "/d/a"},
		{Kind: Close, Path: "/d/a"},
		{Kind: OpenDir, Path: "/d"},
		{Kind: Sync, Path: "/d"},
		{Kind: Close, Path: "/d"},
		{Kind: Rename, Path: "/d/a", NewPath: "/d/b"},
		{Kind: Open, Path: "/d/b"},
		{Kind: Read, Path: "/d/b", Offset: 0, Len: 4},
		{Kind: ReadAt, Path: "/d/b", Offset: 7, Len: 4},
		{Kind: Read, Path: "/d/b", Offset: 4, Len: 100},
		{Kind: Read, Path: "/d/b", Offset: 11, Len: 100},
		{Kind: Stat, Path: "/d/b"},
		{Kind: Close, Path: "/d/b"},
		{Kind: List, Path: "/d"},
		{Kind: Stat, Path: "/d/b"},
		{Kind: Link, Path: "/d/b", NewPath: "/d/c"},
		{Kind: Remove, Path: "/d/c"},
		{Kind: ReuseForWrite, Path: "/d/b", NewPath: "/d/e"},
		{Kind: Close, Path: "/d/e"},
		{Kind: Lock, Path: "/LOCK"},
		{Kind: RemoveAll, Path: "/d"},
	}
	for i := range want {
		want[i].Index = int64(i)
	}
	got := fs.Ops()
	if !slices.Equal(got, want) {
		t.Errorf("ops differ")
		for i := range max(len(got), len(want)) {
			var g, w Op
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			mark := "  "
			if g != w {
				mark = "!="
			}
			t.Logf("%s got %-40v want %v", mark, g, w)
		}
	}
	if n := fs.Count(); n != int64(len(want)) {
		t.Errorf("Count() = %d, want %d", n, len(want))
	}
	if inj := fs.Injected(); len(inj) != 0 {
		t.Errorf("Injected() = %v with no injector", inj)
	}
}

func TestOpString(t *testing.T) {
	tests := []struct {
		op   Op
		want string
	}{
		{Op{Index: 3, Kind: Write, Path: "/l/1.seg", Offset: 64, Len: 100}, "#3 Write /l/1.seg off=64 len=100"},
		{Op{Index: 4, Kind: ReadAt, Path: "a", Offset: 7, Len: 1}, "#4 ReadAt a off=7 len=1"},
		{Op{Index: 7, Kind: Rename, Path: "/a", NewPath: "/b"}, "#7 Rename /a -> /b"},
		{Op{Index: 8, Kind: Truncate, Path: "/a", Offset: 12}, "#8 Truncate /a size=12"},
		{Op{Index: 0, Kind: Sync, Path: "/"}, "#0 Sync /"},
		{Op{Index: 1, Kind: 0, Path: "x"}, "#1 OpKind(0) x"},
	}
	for _, tt := range tests {
		if got := tt.op.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	for k := Create; k <= Preallocate; k++ {
		if s := k.String(); strings.HasPrefix(s, "OpKind(") {
			t.Errorf("OpKind %d has no name", int(k))
		}
	}
	if s := (Preallocate + 1).String(); s != fmt.Sprintf("OpKind(%d)", int(Preallocate+1)) {
		t.Errorf("kind past the last = %q", s)
	}
	for f, want := range map[Fault]string{NoFault: "NoFault", ENOSPC: "ENOSPC", EIO: "EIO", ShortWrite: "ShortWrite", 9: "Fault(9)"} {
		if got := f.String(); got != want {
			t.Errorf("Fault(%d).String() = %q, want %q", int(f), got, want)
		}
	}
}

// TestWriteFaultWritesNothing: ENOSPC and EIO on Write and WriteAt leave the
// file as it was.
func TestWriteFaultWritesNothing(t *testing.T) {
	for _, fault := range []Fault{ENOSPC, EIO} {
		for _, kind := range []OpKind{Write, WriteAt} {
			t.Run(fault.String()+"/"+kind.String(), func(t *testing.T) {
				mem := vfs.NewMem()
				writeFile(t, mem, "f", "before")
				fs := Wrap(mem)
				f, err := fs.OpenReadWrite("f", vfs.WriteCategoryUnspecified)
				must(t, err)
				defer f.Close()
				fs.SetInjector(Always(kind, fault))
				var n int
				if kind == Write {
					n, err = f.Write([]byte("AFTER!"))
				} else {
					n, err = f.WriteAt([]byte("AFTER!"), 2)
				}
				if n != 0 {
					t.Errorf("n = %d, want 0", n)
				}
				wantInjected(t, err, fault.errno())
				if got := vfs.IsNoSpaceError(err); got != (fault == ENOSPC) {
					t.Errorf("vfs.IsNoSpaceError = %v", got)
				}
				if got := string(readFile(t, mem, "f")); got != "before" {
					t.Errorf("file = %q, want it unchanged", got)
				}
				inj := fs.Injected()
				if len(inj) != 1 || inj[0].Kind != kind || inj[0].Index != 1 {
					t.Errorf("Injected() = %v, want the one %v at #1", inj, kind)
				}
				if !strings.Contains(err.Error(), inj[0].String()) {
					t.Errorf("error %q does not name the op %q", err, inj[0])
				}
			})
		}
	}
}

func TestShortWrite(t *testing.T) {
	tests := []struct {
		data    string
		written string
	}{
		{"0123456789", "01234"},
		{"0123456", "012"},
		{"01", "0"},
		{"0", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("Write/len%d", len(tt.data)), func(t *testing.T) {
			mem := vfs.NewMem()
			fs := Wrap(mem)
			f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
			must(t, err)
			defer f.Close()
			fs.SetInjector(OnKind(Write, 0, ShortWrite))
			n, err := f.Write([]byte(tt.data))
			wantInjected(t, err, syscall.EIO)
			if n != len(tt.written) {
				t.Errorf("n = %d, want %d", n, len(tt.written))
			}
			if got := string(readFile(t, mem, "f")); got != tt.written {
				t.Errorf("file = %q, want %q", got, tt.written)
			}
			// The next Write continues after the bytes that were written,
			// and the record says so.
			_, err = f.Write([]byte("X"))
			must(t, err)
			if got := string(readFile(t, mem, "f")); got != tt.written+"X" {
				t.Errorf("after next write: file = %q, want %q", got, tt.written+"X")
			}
			ops := fs.Ops()
			if last := ops[len(ops)-1]; last.Offset != int64(len(tt.written)) {
				t.Errorf("next write recorded at %d, want %d", last.Offset, len(tt.written))
			}
		})
	}
	t.Run("WriteAt", func(t *testing.T) {
		mem := vfs.NewMem()
		writeFile(t, mem, "f", "..........")
		fs := Wrap(mem)
		f, err := fs.OpenReadWrite("f", vfs.WriteCategoryUnspecified)
		must(t, err)
		defer f.Close()
		fs.SetInjector(Always(WriteAt, ShortWrite))
		n, err := f.WriteAt([]byte("abcdef"), 2)
		wantInjected(t, err, syscall.EIO)
		if n != 3 {
			t.Errorf("n = %d, want 3", n)
		}
		if got := string(readFile(t, mem, "f")); got != "..abc....." {
			t.Errorf("file = %q, want %q", got, "..abc.....")
		}
	})
	t.Run("other ops act as EIO", func(t *testing.T) {
		mem := vfs.NewMem()
		fs := Wrap(mem)
		fs.SetInjector(Always(Create, ShortWrite))
		_, err := fs.Create("f", vfs.WriteCategoryUnspecified)
		wantInjected(t, err, syscall.EIO)
		if _, err := mem.Stat("f"); err == nil {
			t.Errorf("file created despite the fault")
		}
	})
}

// TestFailedSyncLeavesDataUnsynced: a failed sync does not reach the
// crashable MemFS, so a crash loses what was written before it; a sync that
// succeeds keeps it.
func TestFailedSyncLeavesDataUnsynced(t *testing.T) {
	syncs := map[string]func(vfs.File) error{
		"Sync":     vfs.File.Sync,
		"SyncData": vfs.File.SyncData,
		"SyncTo": func(f vfs.File) error {
			full, err := f.SyncTo(1 << 20)
			if full && err != nil {
				return fmt.Errorf("SyncTo reported a full sync and %w", err)
			}
			return err
		},
	}
	for name, sync := range syncs {
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fs := Wrap(mem)
			f, err := fs.Create("/seg", vfs.WriteCategoryUnspecified)
			must(t, err)
			dir, err := fs.OpenDir("/")
			must(t, err)
			must(t, dir.Sync()) // the name survives a crash, empty
			must(t, dir.Close())
			_, err = f.Write([]byte("record"))
			must(t, err)

			fs.SetInjector(Always(Sync, EIO))
			wantInjected(t, sync(f), syscall.EIO)
			if got := string(readFile(t, mem.CrashClone(vfs.CrashCloneCfg{}), "/seg")); got != "" {
				t.Errorf("after failed %s, crash keeps %q, want nothing", name, got)
			}

			fs.SetInjector(nil)
			must(t, f.Sync()) // the check above can fail: a real sync keeps the data
			if got := string(readFile(t, mem.CrashClone(vfs.CrashCloneCfg{}), "/seg")); got != "record" {
				t.Errorf("after a good sync, crash keeps %q, want %q", got, "record")
			}
			must(t, f.Close())
		})
	}
}

func TestFailedRename(t *testing.T) {
	mem := vfs.NewMem()
	writeFile(t, mem, "a", "old a")
	writeFile(t, mem, "b", "old b")
	fs := Wrap(mem)
	fs.SetInjector(Always(Rename, EIO))
	wantInjected(t, fs.Rename("a", "b"), syscall.EIO)
	if got := string(readFile(t, mem, "a")); got != "old a" {
		t.Errorf("a = %q", got)
	}
	if got := string(readFile(t, mem, "b")); got != "old b" {
		t.Errorf("b = %q", got)
	}
	fs.SetInjector(nil)
	must(t, fs.Rename("a", "b"))
	if got := string(readFile(t, mem, "b")); got != "old a" {
		t.Errorf("after a good rename, b = %q", got)
	}
}

// TestFailedOpen: the calls that return a file return none, and create
// nothing, when they fail.
func TestFailedOpen(t *testing.T) {
	calls := map[OpKind]func(fs vfs.FS) (vfs.File, error){
		Create: func(fs vfs.FS) (vfs.File, error) { return fs.Create("new", vfs.WriteCategoryUnspecified) },
		OpenReadWrite: func(fs vfs.FS) (vfs.File, error) {
			return fs.OpenReadWrite("new", vfs.WriteCategoryUnspecified)
		},
		Open:    func(fs vfs.FS) (vfs.File, error) { return fs.Open("old") },
		OpenDir: func(fs vfs.FS) (vfs.File, error) { return fs.OpenDir("/") },
		ReuseForWrite: func(fs vfs.FS) (vfs.File, error) {
			return fs.ReuseForWrite("old", "new", vfs.WriteCategoryUnspecified)
		},
	}
	for kind, call := range calls {
		t.Run(kind.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			writeFile(t, mem, "old", "data")
			fs := Wrap(mem)
			fs.SetInjector(Always(kind, ENOSPC))
			f, err := call(fs)
			wantInjected(t, err, syscall.ENOSPC)
			if f != nil {
				t.Errorf("file = %v, want nil", f)
			}
			names, err := mem.List("/")
			must(t, err)
			if !slices.Equal(names, []string{"old"}) {
				t.Errorf("files = %v, want [old]", names)
			}
			// And without the fault the same call works: the test can fail.
			fs.SetInjector(nil)
			f, err = call(fs)
			must(t, err)
			must(t, f.Close())
		})
	}
}

// TestFailedCloseStillCloses: the wrapped file is closed even when Close
// reports an injected fault. MemFS with Windows semantics refuses to remove
// an open file, which shows whether it was closed.
func TestFailedCloseStillCloses(t *testing.T) {
	mem := vfs.NewMem()
	mem.UseWindowsSemantics(true)
	fs := Wrap(mem)
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	must(t, err)
	if err := mem.Remove("f"); err == nil {
		t.Fatal("MemFS removed an open file; this test cannot tell if Close closed")
	}
	fs.SetInjector(Always(Close, EIO))
	wantInjected(t, f.Close(), syscall.EIO)
	must(t, mem.Remove("f"))
}

func TestFailedLock(t *testing.T) {
	mem := vfs.NewMem()
	fs := Wrap(mem)
	fs.SetInjector(OnKind(Lock, 0, EIO))
	lock, err := fs.Lock("LOCK")
	wantInjected(t, err, syscall.EIO)
	if lock != nil {
		t.Errorf("lock = %v, want nil", lock)
	}
	lock, err = mem.Lock("LOCK") // the failed Lock took nothing
	must(t, err)
	must(t, lock.Close())
}

// workload is a scripted sequence that stops at its first error.
func workload(fs vfs.FS) error {
	if err := fs.MkdirAll("/l", 0o755); err != nil {
		return err
	}
	f, err := fs.Create("/l/1.seg", vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	for _, rec := range []string{"header", "one", "two"} {
		if _, err := f.Write([]byte(rec)); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename("/l/1.seg", "/l/2.seg"); err != nil {
		return err
	}
	d, err := fs.OpenDir("/l")
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	if err := d.Close(); err != nil {
		return err
	}
	_, err = fs.List("/l")
	return err
}

// TestAtIndex fails each operation of the workload in turn and checks that
// exactly that one failed, after the same operations as a clean run.
func TestAtIndex(t *testing.T) {
	clean := Wrap(vfs.NewMem())
	must(t, workload(clean))
	cleanOps := clean.Ops()
	if len(cleanOps) != 12 {
		t.Fatalf("clean workload made %d ops, want 12: %v", len(cleanOps), cleanOps)
	}
	for i, target := range cleanOps {
		fs := Wrap(vfs.NewMem())
		fs.SetInjector(AtIndex(int64(i), EIO))
		err := workload(fs)
		wantInjected(t, err, syscall.EIO)
		if inj := fs.Injected(); len(inj) != 1 || inj[0] != target {
			t.Errorf("AtIndex(%d): Injected() = %v, want [%v]", i, inj, target)
		}
		if ops := fs.Ops(); !slices.Equal(ops, cleanOps[:i+1]) {
			t.Errorf("AtIndex(%d): ops = %v, want %v", i, ops, cleanOps[:i+1])
		}
	}
}

// TestAtIndexOnlyThatOp: the operations after the failed one succeed.
func TestAtIndexOnlyThatOp(t *testing.T) {
	mem := vfs.NewMem()
	fs := Wrap(mem)
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified) // #0
	must(t, err)
	fs.SetInjector(AtIndex(3, ENOSPC))
	var failed []int
	for i, b := range []byte("abcde") { // #1 to #5
		if _, err := f.Write([]byte{b}); err != nil {
			wantInjected(t, err, syscall.ENOSPC)
			failed = append(failed, i)
		}
	}
	if !slices.Equal(failed, []int{2}) {
		t.Errorf("failed writes %v, want [2]", failed)
	}
	if got := string(readFile(t, mem, "f")); got != "abde" {
		t.Errorf("file = %q, want %q", got, "abde")
	}
}

func TestOnKind(t *testing.T) {
	fs := Wrap(vfs.NewMem())
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	must(t, err)
	_, err = f.Write([]byte("before install"))
	must(t, err)
	fs.SetInjector(OnKind(Write, 2, EIO)) // counts writes from here
	var failed []int
	for i := range 6 {
		must(t, f.Sync()) // other kinds do not count
		if _, err := f.Write([]byte{'x'}); err != nil {
			wantInjected(t, err, syscall.EIO)
			failed = append(failed, i)
		}
	}
	if !slices.Equal(failed, []int{2}) {
		t.Errorf("failed writes %v, want [2]", failed)
	}
	if inj := fs.Injected(); len(inj) != 1 || inj[0].Kind != Write || inj[0].Offset != 16 {
		t.Errorf("Injected() = %v, want one Write at offset 16", inj)
	}
	must(t, f.Close())
}

func TestAlways(t *testing.T) {
	mem := vfs.NewMem()
	fs := Wrap(mem)
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	must(t, err)
	fs.SetInjector(Always(Write, ENOSPC))
	for range 4 {
		_, err := f.Write([]byte("x"))
		wantInjected(t, err, syscall.ENOSPC)
		must(t, f.Sync())
	}
	if n := len(fs.Injected()); n != 4 {
		t.Errorf("%d injected, want 4", n)
	}
	fs.SetInjector(nil) // space freed
	_, err = f.Write([]byte("y"))
	must(t, err)
	must(t, f.Close())
	if got := string(readFile(t, mem, "f")); got != "y" {
		t.Errorf("file = %q, want %q", got, "y")
	}
}

// TestFirst: precedence goes to the first injector that reports a fault,
// and every injector sees every op, so the second OnKind counts the sync
// that the first one failed.
func TestFirst(t *testing.T) {
	fs := Wrap(vfs.NewMem())
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	must(t, err)
	defer f.Close()

	fs.SetInjector(First(Always(Sync, EIO), Always(Sync, ENOSPC)))
	wantInjected(t, f.Sync(), syscall.EIO)

	fs.SetInjector(First(OnKind(Sync, 0, EIO), OnKind(Sync, 1, ENOSPC)))
	wantInjected(t, f.Sync(), syscall.EIO)
	wantInjected(t, f.Sync(), syscall.ENOSPC)
	must(t, f.Sync())
	if got := fs.Injected(); len(got) != 3 {
		t.Errorf("Injected() = %v, want 3 ops", got)
	}
}

func TestSetRecording(t *testing.T) {
	fs := Wrap(vfs.NewMem())
	must(t, fs.MkdirAll("a", 0o755)) // #0
	fs.SetRecording(false)
	fs.SetInjector(AtIndex(2, EIO))
	must(t, fs.MkdirAll("b", 0o755))                      // #1
	wantInjected(t, fs.MkdirAll("c", 0o755), syscall.EIO) // #2
	fs.SetRecording(true)
	must(t, fs.MkdirAll("d", 0o755)) // #3
	want := []Op{{Index: 0, Kind: MkdirAll, Path: "a"}, {Index: 3, Kind: MkdirAll, Path: "d"}}
	if got := fs.Ops(); !slices.Equal(got, want) {
		t.Errorf("Ops() = %v, want %v", got, want)
	}
	if got := fs.Injected(); len(got) != 1 || got[0].Path != "c" {
		t.Errorf("Injected() = %v, want the MkdirAll of c", got)
	}
	if n := fs.Count(); n != 4 {
		t.Errorf("Count() = %d, want 4", n)
	}
}

func TestTruncate(t *testing.T) {
	type truncater = interface{ Truncate(int64) error }

	t.Run("Default", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "f")
		fs := Wrap(vfs.Default)
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		must(t, err)
		defer f.Close()
		_, err = f.Write([]byte("0123456789"))
		must(t, err)
		tr, ok := f.(truncater)
		if !ok {
			t.Fatalf("%T has no Truncate", f)
		}

		fs.SetInjector(OnKind(Truncate, 0, EIO))
		wantInjected(t, tr.Truncate(4), syscall.EIO)
		if fi, err := os.Stat(name); err != nil || fi.Size() != 10 {
			t.Fatalf("after failed truncate: size %v, %v; want 10", fi.Size(), err)
		}

		must(t, tr.Truncate(4))
		if fi, err := os.Stat(name); err != nil || fi.Size() != 4 {
			t.Fatalf("after truncate: size %v, %v; want 4", fi.Size(), err)
		}
		got, err := os.ReadFile(name)
		must(t, err)
		if string(got) != "0123" {
			t.Errorf("file = %q, want %q", got, "0123")
		}
		ops := fs.Ops()
		want := Op{Index: 3, Kind: Truncate, Path: name, Offset: 4}
		if last := ops[len(ops)-1]; last != want {
			t.Errorf("recorded %v, want %v", last, want)
		}
	})

	t.Run("MemFS", func(t *testing.T) {
		mem := vfs.NewMem()
		fs := Wrap(mem)
		f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
		must(t, err)
		defer f.Close()
		_, err = f.Write([]byte("0123456789"))
		must(t, err)
		err = f.(truncater).Truncate(4)
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("err = %v, want errors.ErrUnsupported", err)
		}
		if errors.Is(err, ErrInjected) {
			t.Errorf("err = %v, is not injected", err)
		}
		if got := string(readFile(t, mem, "f")); got != "0123456789" {
			t.Errorf("file = %q, want it unchanged", got)
		}
	})
}

// TestConcurrent runs writers on many goroutines, while another changes
// the injector and reads the record, for the race detector; then checks
// that every op was counted once, in order.
func TestConcurrent(t *testing.T) {
	const (
		writers = 8
		writes  = 100
		opsEach = 1 + writes + 2 // Create, Writes, Sync, Close
	)
	mem := vfs.NewMem()
	fs := Wrap(mem)
	done := make(chan struct{})
	var observer sync.WaitGroup
	observer.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			fs.SetInjector(Always(List, EIO)) // a kind the writers do not use
			_ = fs.Ops()
			_ = fs.Count()
			fs.SetInjector(nil)
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			f, err := fs.Create(fmt.Sprintf("f%d", w), vfs.WriteCategoryUnspecified)
			if err != nil {
				errs <- err
				return
			}
			for i := range writes {
				if _, err := f.Write([]byte{byte(i)}); err != nil {
					errs <- err
					return
				}
			}
			if err := f.Sync(); err != nil {
				errs <- err
				return
			}
			errs <- f.Close()
		})
	}
	wg.Wait()
	close(done)
	observer.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}

	if n := fs.Count(); n != writers*opsEach {
		t.Fatalf("Count() = %d, want %d", n, writers*opsEach)
	}
	ops := fs.Ops()
	if len(ops) != writers*opsEach {
		t.Fatalf("%d ops recorded, want %d", len(ops), writers*opsEach)
	}
	next := map[string]int64{} // per file: the offset of its next write
	for i, op := range ops {
		if op.Index != int64(i) {
			t.Fatalf("ops[%d].Index = %d", i, op.Index)
		}
		if op.Kind == Write {
			if op.Offset != next[op.Path] {
				t.Fatalf("%v: offset %d, want %d", op, op.Offset, next[op.Path])
			}
			next[op.Path]++
		}
	}
	for w := range writers {
		name := fmt.Sprintf("f%d", w)
		if got := readFile(t, mem, name); len(got) != writes || got[writes-1] != writes-1 {
			t.Errorf("%s: %d bytes, want %d", name, len(got), writes)
		}
	}
}

// ExampleFS fails the second write of a workload and prints what it did.
func ExampleFS() {
	mem := vfs.NewMem()
	fs := Wrap(mem)
	fs.SetInjector(OnKind(Write, 1, ShortWrite))

	f, _ := fs.Create("/seg", vfs.WriteCategoryUnspecified)
	_, _ = f.Write([]byte("header"))
	n, err := f.Write([]byte("record"))
	_ = f.Close()

	fmt.Println(n, errors.Is(err, ErrInjected), errors.Is(err, syscall.EIO))
	for _, op := range fs.Ops() {
		fmt.Println(op)
	}
	data, _ := mem.UnsafeGetFileDataBuffer("/seg")
	fmt.Printf("%q %v\n", data, bytes.Equal(data, []byte("headerrec")))
	// Output:
	// 3 true true
	// #0 Create /seg
	// #1 Write /seg off=0 len=6
	// #2 Write /seg off=6 len=6
	// #3 Close /seg
	// "headerrec" true
}
