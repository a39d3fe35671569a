package segment

import "github.com/cockroachdb/pebble/v2/vfs"

// StartWriteback asks the operating system to begin writing the active
// segment's unsynced bytes to disk now, and returns without waiting for
// them (Linux's sync_file_range with SYNC_FILE_RANGE_WRITE; elsewhere, and
// on a file system without a file descriptor, it does nothing). It is a
// hint, not a sync: it makes nothing durable and reports no error (a write
// error is still reported by the sync that follows). A bulk writer that
// syncs once at the end (an import, Durability None) calls it after each
// Append, so that the disk writes while it goes on, and the fsyncs of a
// segment's rotation and of the end find little left to write.
func (l *Log) StartWriteback() {
	if l.ro != nil {
		return
	}
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	if l.file == nil || l.failure() != nil || l.size <= l.synced {
		return
	}
	if fd := l.file.Fd(); fd != vfs.InvalidFd {
		startWriteback(fd, l.synced, l.size-l.synced)
	}
}
