package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/annal-db/annal/segment/corruption"
)

// TestManifestRoundTrip: a manifest decodes to what was encoded.
func TestManifestRoundTrip(t *testing.T) {
	m := Manifest{V: 1, Ledger: "0000002a", Name: "orders", Epoch: 4, Fence: 17, Segments: 3, SealedSeq: 900, GC: 12,
		Writer:  Identity{Host: "h", PID: 7, Started: time.Unix(5, 0).UTC(), Nonce: "n"},
		Written: time.Unix(9, 0).UTC()}
	got, err := DecodeManifest(ManifestKey(42, 5), 42, m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("decoded %+v, encoded %+v", got, m)
	}
}

// TestManifestRefused: a manifest that is not JSON, of another version or
// ledger, with unknown fields, epoch 0 or inconsistent sealed fields is
// corruption.
func TestManifestRefused(t *testing.T) {
	for name, obj := range map[string]string{
		"not JSON":       `{"v":1,`,
		"version 2":      `{"v":2,"ledger":"0000002a","epoch":1}`,
		"other ledger":   `{"v":1,"ledger":"0000002b","epoch":1}`,
		"unknown field":  `{"v":1,"ledger":"0000002a","epoch":1,"x":1}`,
		"epoch 0":        `{"v":1,"ledger":"0000002a","epoch":0}`,
		"sealed, no seg": `{"v":1,"ledger":"0000002a","epoch":1,"sealedSeq":5}`,
		"two objects":    `{"v":1,"ledger":"0000002a","epoch":1} {}`,
	} {
		if _, err := DecodeManifest(ManifestKey(42, 1), 42, []byte(obj)); !errors.Is(err, corruption.Err) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
