//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package engine

import (
	"os"
	"syscall"
)

// fileOwner returns the uid of the file at path (not following a final
// symbolic link), if it can be read.
func fileOwner(path string) (int, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
