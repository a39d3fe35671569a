// Package storetest is the conformance table of store.Store: every
// implementation runs it, the in-memory one in the store package's tests
// and the S3 one against a real S3 server in the s3test module.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/annal-db/annal/engine/internal/replica/store"
)

// Run runs the conformance table against the stores that open makes: one
// fresh, empty store per case.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, context.Background(), open(t))
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, s store.Store)
}{
	{"PutThenGetAndHead", func(t *testing.T, ctx context.Context, s store.Store) {
		etag := put(t, ctx, s, "a/b", "hello", store.Condition{})
		o, err := s.Get(ctx, "a/b")
		if err != nil || string(o.Data) != "hello" || o.ETag != etag {
			t.Fatalf("Get = %q %s, %v; want hello %s", o.Data, o.ETag, err, etag)
		}
		info, err := s.Head(ctx, "a/b")
		if err != nil || info.Size != 5 || info.ETag != etag || info.Key != "a/b" {
			t.Fatalf("Head = %+v, %v; want a/b size 5 %s", info, err, etag)
		}
	}},
	{"EmptyObject", func(t *testing.T, ctx context.Context, s store.Store) {
		put(t, ctx, s, "empty", "", store.CreateOnly())
		o, err := s.Get(ctx, "empty")
		if err != nil || len(o.Data) != 0 {
			t.Fatalf("Get = %q, %v; want empty", o.Data, err)
		}
	}},
	{"MissingKeyNotFound", func(t *testing.T, ctx context.Context, s store.Store) {
		if _, err := s.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get missing: %v, want ErrNotFound", err)
		}
		if _, err := s.Head(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Head missing: %v, want ErrNotFound", err)
		}
	}},
	{"KnownSHA256Checked", func(t *testing.T, ctx context.Context, s store.Store) {
		// A Put given its data's SHA-256 (WithSHA256) stores the data; one
		// given another hash writes nothing. Reads made with the same
		// context (a read-back after a 412) are not given the hash.
		sumCtx := store.WithSHA256(ctx, sha256.Sum256([]byte("chunk")))
		put(t, sumCtx, s, "k", "chunk", store.CreateOnly())
		want(t, sumCtx, s, "k", "chunk")
		if _, err := s.Put(store.WithSHA256(ctx, sha256.Sum256([]byte("chunk"))), "other", []byte("other bytes"), store.CreateOnly()); err == nil {
			t.Fatal("a Put whose data is not the SHA-256 given succeeded")
		}
		if o, err := s.Get(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after a Put whose data is not the SHA-256 given, Get = %q, %v; want ErrNotFound", o.Data, err)
		}
	}},
	{"CreateOnlyRefusesExisting", func(t *testing.T, ctx context.Context, s store.Store) {
		put(t, ctx, s, "k", "first", store.CreateOnly())
		_, err := s.Put(ctx, "k", []byte("second"), store.CreateOnly())
		if !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("second create-only Put: %v, want ErrPreconditionFailed", err)
		}
		if errors.Is(err, store.ErrMaybeApplied) {
			t.Errorf("a Put without an ambiguous attempt says it may have been applied: %v", err)
		}
		want(t, ctx, s, "k", "first")
	}},
	{"CreateOnlyRefusesSameBytes", func(t *testing.T, ctx context.Context, s store.Store) {
		// A retried create of the same bytes is refused too: only reading
		// back tells a caller that the object is its own.
		put(t, ctx, s, "k", "same", store.CreateOnly())
		if _, err := s.Put(ctx, "k", []byte("same"), store.CreateOnly()); !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("create-only Put of the same bytes: %v, want ErrPreconditionFailed", err)
		}
	}},
	{"ReplaceIfMatch", func(t *testing.T, ctx context.Context, s store.Store) {
		etag := put(t, ctx, s, "cp", "v1", store.CreateOnly())
		etag2 := put(t, ctx, s, "cp", "v2", store.ReplaceIf(etag))
		if etag2 == etag {
			t.Errorf("replacing v1 with v2 kept the ETag %s", etag)
		}
		want(t, ctx, s, "cp", "v2")
		// The old ETag no longer matches.
		if _, err := s.Put(ctx, "cp", []byte("v3"), store.ReplaceIf(etag)); !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("Put with a stale ETag: %v, want ErrPreconditionFailed", err)
		}
		want(t, ctx, s, "cp", "v2")
	}},
	{"ReplaceIfWrongETag", func(t *testing.T, ctx context.Context, s store.Store) {
		put(t, ctx, s, "cp", "v1", store.Condition{})
		_, err := s.Put(ctx, "cp", []byte("v2"), store.ReplaceIf(`"0123456789abcdef0123456789abcdef"`))
		if !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("Put with a wrong ETag: %v, want ErrPreconditionFailed", err)
		}
		want(t, ctx, s, "cp", "v1")
	}},
	{"ReplaceIfOnMissingKey", func(t *testing.T, ctx context.Context, s store.Store) {
		_, err := s.Put(ctx, "none", []byte("v"), store.ReplaceIf(`"0123456789abcdef0123456789abcdef"`))
		if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("If-Match Put on a missing key: %v, want ErrPreconditionFailed or ErrNotFound", err)
		}
		if _, err := s.Get(ctx, "none"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused Put left an object: %v", err)
		}
	}},
	{"UnconditionalReplaces", func(t *testing.T, ctx context.Context, s store.Store) {
		put(t, ctx, s, "k", "v1", store.Condition{})
		put(t, ctx, s, "k", "v2", store.Condition{})
		want(t, ctx, s, "k", "v2")
	}},
	{"DeleteThenMissing", func(t *testing.T, ctx context.Context, s store.Store) {
		put(t, ctx, s, "k", "v", store.Condition{})
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete of a missing key: %v, want nil", err)
		}
		// A deleted key can be created again: this is why garbage
		// collection must never delete what a zombie could re-create.
		put(t, ctx, s, "k", "again", store.CreateOnly())
	}},
	{"ListPrefixStartAfterPages", func(t *testing.T, ctx context.Context, s store.Store) {
		for _, k := range []string{"wal/3", "wal/1", "wal/5", "wal/2", "wal/4", "seg/1", "walrus"} {
			put(t, ctx, s, k, "x"+k, store.CreateOnly())
		}
		var got []string
		startAfter, pages := "", 0
		for {
			p, err := s.List(ctx, "wal/", startAfter, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(p.Objects) > 2 {
				t.Fatalf("page of %d objects, limit 2", len(p.Objects))
			}
			for _, o := range p.Objects {
				got = append(got, o.Key)
				if o.Size != int64(len("x"+o.Key)) || o.ETag == "" {
					t.Errorf("listed %+v: wrong size or no ETag", o)
				}
			}
			if !p.Truncated {
				break
			}
			if pages > 10 {
				t.Fatal("List never ends")
			}
			startAfter = got[len(got)-1]
		}
		if fmt.Sprint(got) != "[wal/1 wal/2 wal/3 wal/4 wal/5]" || pages != 3 {
			t.Fatalf("listed %v in %d pages, want wal/1..wal/5 in 3", got, pages)
		}
		p, err := s.List(ctx, "wal/", "wal/3", 0)
		if err != nil || len(p.Objects) != 2 || p.Objects[0].Key != "wal/4" || p.Truncated {
			t.Fatalf("List after wal/3 = %+v, %v; want wal/4 wal/5", p, err)
		}
		p, err = s.List(ctx, "", "", 0)
		if err != nil || len(p.Objects) != 7 {
			t.Fatalf("List of everything = %+v, %v; want 7 objects", p, err)
		}
		p, err = s.List(ctx, "nothing/", "", 0)
		if err != nil || len(p.Objects) != 0 || p.Truncated {
			t.Fatalf("List of an empty prefix = %+v, %v", p, err)
		}
	}},
	{"FoldersUnderPrefix", func(t *testing.T, ctx context.Context, s store.Store) {
		for _, k := range []string{
			"ledgers/0000000b/manifest", "ledgers/0000000b/wal/1", // nested keys: one folder
			"ledgers/0000000a/checkpoint", "ledgers/0000000a/wal/2",
			"ledgers/notes/readme",                             // a folder, if no ledger's
			"ledgers/stray", "ledgers/0000000a0", "ledgers/zz", // objects directly under: no folder
			"ledgersX/y", "nodes/n1", "top", // outside the prefix
		} {
			put(t, ctx, s, k, "x", store.CreateOnly())
		}
		all := []string{"ledgers/0000000a/", "ledgers/0000000b/", "ledgers/notes/"}
		p, err := s.Folders(ctx, "ledgers/", "", 0)
		if err != nil || !slices.Equal(p.Folders, all) || p.Truncated {
			t.Fatalf("Folders of ledgers/ = %+v, %v; want %v, not truncated", p, err, all)
		}
		// One folder a page: every folder once, in order, and no empty
		// page that says more follow.
		got := folderPages(t, ctx, s, "ledgers/", 1)
		if !slices.Equal(got, all) {
			t.Fatalf("Folders of ledgers/ one a page = %v, want %v", got, all)
		}
		// After a folder: none of its keys gives it again, and the object
		// just after its keys (ledgers/0000000a0) is no folder.
		p, err = s.Folders(ctx, "ledgers/", "ledgers/0000000a/", 0)
		if err != nil || !slices.Equal(p.Folders, all[1:]) || p.Truncated {
			t.Fatalf("Folders of ledgers/ after ledgers/0000000a/ = %+v, %v; want %v", p, err, all[1:])
		}
		p, err = s.Folders(ctx, "ledgers/", "ledgers/notes/", 0)
		if err != nil || len(p.Folders) != 0 || p.Truncated {
			t.Fatalf("Folders of ledgers/ after the last = %+v, %v; want none", p, err)
		}
		p, err = s.Folders(ctx, "", "", 0)
		if want := []string{"ledgers/", "ledgersX/", "nodes/"}; err != nil || !slices.Equal(p.Folders, want) || p.Truncated {
			t.Fatalf("Folders of the empty prefix = %+v, %v; want %v (not the object top)", p, err, want)
		}
		p, err = s.Folders(ctx, "nothing/", "", 0)
		if err != nil || len(p.Folders) != 0 || p.Truncated {
			t.Fatalf("Folders of a prefix that holds nothing = %+v, %v", p, err)
		}
	}},
	{"FoldersAfterManyObjects", func(t *testing.T, ctx context.Context, s store.Store) {
		// More objects directly under the prefix than a page holds,
		// before the folders: S3 counts them in a page's keys, and the
		// folders after them must still come, in pages that each hold one.
		for _, k := range []string{"f/1", "f/2", "f/3", "f/4", "f/5", "f/6/a", "f/6/b", "f/7", "f/8/a", "f/9"} {
			put(t, ctx, s, k, "x", store.CreateOnly())
		}
		if got, want := folderPages(t, ctx, s, "f/", 2), []string{"f/6/", "f/8/"}; !slices.Equal(got, want) {
			t.Fatalf("Folders of f/ two a page = %v, want %v", got, want)
		}
	}},
	{"FoldersPageOfAThousand", func(t *testing.T, ctx context.Context, s store.Store) {
		// limit 0 is a page of 1000, S3's largest: 1001 folders are two.
		var want []string
		for i := range 1001 {
			want = append(want, fmt.Sprintf("p/%04d/", i))
		}
		putAll(t, ctx, s, want, "o")
		p, err := s.Folders(ctx, "p/", "", 0)
		if err != nil || len(p.Folders) != 1000 || !p.Truncated || !slices.Equal(p.Folders, want[:1000]) {
			t.Fatalf("Folders of 1001 folders: %d folders, truncated %v, %v; want the first 1000, truncated", len(p.Folders), p.Truncated, err)
		}
		p, err = s.Folders(ctx, "p/", p.Folders[999], 0)
		if err != nil || !slices.Equal(p.Folders, want[1000:]) || p.Truncated {
			t.Fatalf("Folders after the first 1000 = %+v, %v; want %v", p, err, want[1000:])
		}
	}},
	{"RacingCreatesOneWins", func(t *testing.T, ctx context.Context, s store.Store) {
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Put(ctx, "manifest/1", []byte(fmt.Sprintf("writer %d", i)), store.CreateOnly())
			}()
		}
		wg.Wait()
		winner, refused, conflicts := -1, 0, 0
		defer func() { t.Logf("%d racing creates: %d refused with 412, %d with 409", n, refused, conflicts) }()
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("writers %d and %d both created the key", winner, i)
				}
				winner = i
			case errors.Is(err, store.ErrPreconditionFailed):
				refused++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		if winner < 0 {
			// Every racer may get 409 on S3; then nothing was written.
			if _, err := s.Get(ctx, "manifest/1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("no writer won but the key holds an object: %v", err)
			}
			return
		}
		want(t, ctx, s, "manifest/1", fmt.Sprintf("writer %d", winner))
	}},
	{"ProbePasses", func(t *testing.T, ctx context.Context, s store.Store) {
		if err := store.Probe(ctx, s, "probe/"); err != nil {
			t.Fatal(err)
		}
		p, err := s.List(ctx, "probe/", "", 0)
		if err != nil || len(p.Objects) != 0 {
			t.Fatalf("the probe left %+v, %v", p.Objects, err)
		}
	}},
}

// folderPages lists the folders under prefix limit a page to the end,
// checking each page: no more than limit folders, in order after the
// last, and none empty but truncated.
func folderPages(t *testing.T, ctx context.Context, s store.Store, prefix string, limit int) []string {
	t.Helper()
	var got []string
	after := ""
	for pages := 1; ; pages++ {
		p, err := s.Folders(ctx, prefix, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Folders) > limit {
			t.Fatalf("page %d of Folders %s: %d folders, limit %d", pages, prefix, len(p.Folders), limit)
		}
		for _, f := range p.Folders {
			if f <= after {
				t.Fatalf("page %d of Folders %s after %q gives %q", pages, prefix, after, f)
			}
			got, after = append(got, f), f
		}
		if !p.Truncated {
			return got
		}
		if len(p.Folders) == 0 {
			t.Fatalf("page %d of Folders %s is empty and truncated: nothing to continue after", pages, prefix)
		}
		if pages > 20 {
			t.Fatalf("Folders %s never ends: %v", prefix, got)
		}
	}
}

// putAll puts an object named name under each folder, 16 at a time.
func putAll(t *testing.T, ctx context.Context, s store.Store, folders []string, name string) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, f := range folders {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := s.Put(ctx, f+name, []byte("x"), store.Condition{}); err != nil {
				t.Errorf("Put %s: %v", f+name, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func put(t *testing.T, ctx context.Context, s store.Store, key, data string, cond store.Condition) string {
	t.Helper()
	etag, err := s.Put(ctx, key, []byte(data), cond)
	if err != nil {
		t.Fatalf("Put %s %+v: %v", key, cond, err)
	}
	if etag == "" {
		t.Fatalf("Put %s returned no ETag", key)
	}
	return etag
}

func want(t *testing.T, ctx context.Context, s store.Store, key, data string) {
	t.Helper()
	o, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if !bytes.Equal(o.Data, []byte(data)) {
		t.Fatalf("Get %s = %q, want %q", key, o.Data, data)
	}
}
