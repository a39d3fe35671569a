//go:build !linux

package machine

// fsType returns "": the file system type is only read on Linux.
func fsType(dir string) (string, error) { return "", nil }
