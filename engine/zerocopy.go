package engine

import "unsafe"

// stringBytes returns s as a byte slice without copying, which must not
// be written to.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// bytesString returns b as a string without copying. The string must not
// outlive b's contents.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
