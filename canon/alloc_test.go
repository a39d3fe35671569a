//go:build !race

// The race detector makes sync.Pool drop objects at random, so the pool
// behind the package-level functions allocates under -race by design.

package canon

import "testing"

func TestPackageFunctionsDoNotAllocate(t *testing.T) {
	src := []byte(`{"name":"preview","description":"Show \u0061nd Tell.","n":[1.50,1e21,-0],"k":{"b":1,"a":2}}`)
	dst := make([]byte, 0, 1024)
	for name, fn := range map[string]func(){
		"Append":       func() { _, _ = Append(dst, src) },
		"AppendObject": func() { _, _ = AppendObject(dst, src) },
		"Valid":        func() { _ = Valid(src) },
		"AppendString": func() { _ = AppendString(dst, "a\"b\n📒") },
		"Unquote":      func() { _, _ = Unquote(dst, []byte(`"a\"b\n\ud83d\udcd2"`)) },
	} {
		fn() // warm the pool
		if allocs := testing.AllocsPerRun(100, fn); allocs != 0 {
			t.Errorf("%s allocates %v times per call once dst has room, want 0", name, allocs)
		}
	}
}
