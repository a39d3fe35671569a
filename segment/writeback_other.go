//go:build !linux

package segment

// startWriteback does nothing where sync_file_range does not exist.
func startWriteback(fd uintptr, off, n int64) {}
