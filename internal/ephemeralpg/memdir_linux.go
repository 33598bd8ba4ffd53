//go:build linux

package ephemeralpg

import "syscall"

// memoryDir is a directory on a memory file system with at least minFree
// bytes free (Linux's /dev/shm, a tmpfs), or "" when there is none.
func memoryDir(minFree uint64) string {
	const dir, tmpfsMagic = "/dev/shm", 0x01021994
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != tmpfsMagic {
		return ""
	}
	if st.Bavail*uint64(st.Bsize) < minFree {
		return ""
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return ""
	}
	return dir
}
