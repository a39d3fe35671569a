package eventid

import (
	"testing"
	"time"
)

// realisticEvent is an event of a typical size: about 250 bytes of meta and
// data.
var realisticEvent = Content{
	Entity: "order",
	Key:    "order-2024-000042",
	Event:  "order-placed",
	Meta:   []byte(`{"actor":"checkout-service","causationId":"0005d5813bf9c44943545b8f9e961c04","correlationId":"c0ffee42-77"}`),
	Data: []byte(`{"currency":"EUR","customer":"Frances Graves","items":[{"qty":2,"sku":"BK-1138"},{"qty":1,"sku":"MG-0042"}],` +
		`"shipTo":{"city":"Brussels","country":"BE"},"total":57.9}`),
}

func TestAllocations(t *testing.T) {
	c := realisticEvent
	prev := MustParse("0005d5813bf9c44943545b8f9e961c04")
	buf := make([]byte, 0, 64)
	text := []byte(prev.String())
	clock := NewClock(0, nil)
	for name, f := range map[string]func(){
		"Content.Checksum": func() { c.Checksum(0x9e961c04, 1642125917275209, prev) },
		"Content.ID":       func() { c.ID(0x9e961c04, 1642125917275209, prev) },
		"Content.LedgerID": func() { c.LedgerID() },
		"ID.AppendHex":     func() { prev.AppendHex(buf[:0]) },
		"ID.AppendUUID":    func() { prev.AppendUUID(buf[:0]) },
		"ID.AppendBase64":  func() { prev.AppendBase64(buf[:0]) },
		"ID.AppendBase32":  func() { prev.AppendBase32(buf[:0]) },
		"LedgerID.Append":  func() { prev.Ledger().AppendHex(buf[:0]) },
		"ParseBytes":       func() { ParseBytes(text) },
		"Clock.Next":       func() { clock.Next() },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

func reportRate(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

func BenchmarkChecksum(b *testing.B) {
	c := realisticEvent
	prev := MustParse("0005d5813bf9c44943545b8f9e961c04")
	size := len(c.Entity) + len(c.Key) + len(c.Event) + len(c.Meta) + len(c.Data) + 8 + 16 + 32
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var sum uint32
	us := uint64(1642125917275209)
	for b.Loop() {
		sum += c.Checksum(0x9e961c04, us, prev)
		us++
	}
	reportRate(b, "events/s")
	_ = sum
}

func BenchmarkLedgerID(b *testing.B) {
	c := realisticEvent
	b.ReportAllocs()
	var sum LedgerID
	for b.Loop() {
		sum += c.LedgerID()
	}
	reportRate(b, "ledgers/s")
	_ = sum
}

func BenchmarkClockNext(b *testing.B) {
	c := NewClock(0, nil)
	b.ReportAllocs()
	for b.Loop() {
		c.Next()
	}
	reportRate(b, "timestamps/s")
}

func BenchmarkClockNextParallel(b *testing.B) {
	c := NewClock(0, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Next()
		}
	})
	reportRate(b, "timestamps/s")
}

// BenchmarkTimeNow is the floor under BenchmarkClockNext.
func BenchmarkTimeNow(b *testing.B) {
	var sum int64
	for b.Loop() {
		sum += time.Now().UnixMicro()
	}
	_ = sum
}

func BenchmarkFormat(b *testing.B) {
	id := MustParse("0005d5813bf9c44943545b8f9e961c04")
	buf := make([]byte, 0, 64)
	for _, f := range textForms {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = f.append(id, buf[:0])
			}
			reportRate(b, "IDs/s")
		})
		b.Run(f.name+"String", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = f.format(id)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	id := MustParse("0005d5813bf9c44943545b8f9e961c04")
	for _, f := range textForms {
		text := []byte(f.format(id))
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseBytes(text); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, "IDs/s")
		})
	}
}
