//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package segment

import "syscall"

// statTimes returns the change and modification times of s, in
// nanoseconds.
func statTimes(s *syscall.Stat_t) (ctime, mtime int64) {
	return s.Ctimespec.Nano(), s.Mtimespec.Nano()
}
