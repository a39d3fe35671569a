//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package segment

import "errors"

// mapSupported is false: segments are read with pread (ReadAt).
const mapSupported = false

// mapGrowing is false: see mmap_unix.go.
const mapGrowing = false

func mmap(fd uintptr, length int64) ([]byte, error) {
	return nil, errors.ErrUnsupported
}

func munmap(b []byte) error { return nil }

func dontNeed(b []byte) {}
