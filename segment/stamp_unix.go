//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package segment

import (
	"os"
	"syscall"
)

// fileIdentity reads the identity of a file of the operating system's
// file system from its stat record; the zero FileIdentity for any other.
func fileIdentity(st os.FileInfo) FileIdentity {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok || s == nil {
		return FileIdentity{}
	}
	ctime, mtime := statTimes(s)
	return FileIdentity{Dev: uint64(s.Dev), Ino: uint64(s.Ino), Size: st.Size(), Ctime: ctime, Mtime: mtime}
}
