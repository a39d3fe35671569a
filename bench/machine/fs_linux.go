package machine

import (
	"fmt"
	"syscall"
)

// fsNames are the names of the file systems of some magic numbers of
// statfs(2) (linux/magic.h).
var fsNames = map[uint32]string{
	0xEF53:     "ext4", // also ext2 and ext3, which share the magic number
	0x58465342: "xfs",
	0x01021994: "tmpfs",
	0x9123683E: "btrfs",
	0x794C7630: "overlay",
	0x2FC12FC1: "zfs",
	0xF2F52010: "f2fs",
	0x6969:     "nfs",
	0x65735546: "fuse",
	0x858458F6: "ramfs",
	0x5346544E: "ntfs",
	0x4D44:     "vfat",
}

// fsType returns the type of the file system of dir: its name if known,
// else its magic number in hex.
func fsType(dir string) (string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	magic := uint32(st.Type) // int64 on most platforms, 32 bits on some
	if name, ok := fsNames[magic]; ok {
		return name, nil
	}
	return fmt.Sprintf("0x%X", magic), nil
}
