package engine

import (
	"os"
	"sync"
	"testing"
)

// fixtures are the data directories built once for the package's tests,
// by name; fixtureRoot holds them, and TestMain removes it.
var (
	fixturesMu  sync.Mutex
	fixtures    = map[string]*fixture{}
	fixtureRoot string
)

type fixture struct {
	mu    sync.Mutex
	dir   string
	built bool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureRoot != "" {
		os.RemoveAll(fixtureRoot)
	}
	os.Exit(code)
}

// fixtureDir returns a closed data directory that build made, the first
// time a test asked for name; later callers (from any test, at the same
// time too) wait for it and get the same directory. It is for a fixture
// that several tests build alike and that costs more to build than to
// copy: a caller must not open or change it, but copies it (copyTree)
// first. If the build fails, so does every caller.
func fixtureDir(t *testing.T, name string, build func(t *testing.T, dir string)) string {
	t.Helper()
	fixturesMu.Lock()
	if fixtureRoot == "" {
		root, err := os.MkdirTemp("", "annal-engine-fixtures-")
		if err != nil {
			fixturesMu.Unlock()
			t.Fatal(err)
		}
		fixtureRoot = root
	}
	f := fixtures[name]
	if f == nil {
		f = &fixture{}
		fixtures[name] = f
	}
	root := fixtureRoot
	fixturesMu.Unlock()

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.built {
		if f.dir == "" {
			t.Fatalf("fixture %s: its build failed in another test", name)
		}
		return f.dir
	}
	f.built = true
	dir, err := os.MkdirTemp(root, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	build(t, dir)
	if !t.Failed() {
		f.dir = dir
	}
	return f.dir
}
