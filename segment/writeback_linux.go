package segment

import "golang.org/x/sys/unix"

// startWriteback starts the writeback of n bytes of the file fd from off,
// without waiting for it. Its error is ignored: a hint, and a failed write
// is reported by the fsync that follows.
func startWriteback(fd uintptr, off, n int64) {
	_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
