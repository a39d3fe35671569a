//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package segment

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapSupported says whether segments may be read from a memory map here:
// a 64-bit Unix, where the address space holds every segment.
const mapSupported = unsafe.Sizeof(uintptr(0)) == 8

// mapGrowing says whether the active segment, which grows by pwrite, may
// be mapped too: Linux's page cache is the same for write(2) and a
// MAP_SHARED mapping, so the bytes of a pwrite are seen through the map
// as soon as the call returns. Elsewhere only segments sealed when they
// are first read are mapped.
const mapGrowing = runtime.GOOS == "linux"

// mmap maps the first length bytes of the file fd read-only and shared.
func mmap(fd uintptr, length int64) ([]byte, error) {
	return unix.Mmap(int(fd), 0, int(length), unix.PROT_READ, unix.MAP_SHARED)
}

// munmap removes a mapping made by mmap.
func munmap(b []byte) error { return unix.Munmap(b) }

// dontNeed tells the kernel that the process no longer needs the pages
// of b, a part of a map made by mmap: they leave its resident set. The
// map is of a file, shared: the pages stay in the page cache, and a later
// read of them maps them again (a minor fault), with the same bytes.
func dontNeed(b []byte) { unix.Madvise(b, unix.MADV_DONTNEED) }
