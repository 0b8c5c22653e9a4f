//go:build linux

package flash

import (
	"fmt"
	"syscall"
)

const oDirect = syscall.O_DIRECT

// File-system magic numbers (statfs f_type) that hold file data in memory.
// Linux 6.6+ accepts O_DIRECT on tmpfs and serves it from RAM, so the flag
// succeeding proves nothing; the type is checked instead.
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// memoryFS names the in-memory file system dir lives on, or "" if none.
func memoryFS(dir string) (string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", err
	}
	switch uint32(st.Type) {
	case tmpfsMagic:
		return "tmpfs", nil
	case ramfsMagic:
		return "ramfs", nil
	}
	return "", nil
}

// fadviseDontNeed asks the kernel to drop the cached pages of a range, so
// the next buffered read of it goes to the device. Dirty pages are not
// dropped: callers sync first.
func fadviseDontNeed(fd uintptr, off, n int64) error {
	const posixFadvDontNeed = 4
	_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, fd, uintptr(off), uintptr(n), posixFadvDontNeed, 0, 0)
	if e != 0 {
		return fmt.Errorf("fadvise(DONTNEED): %w", e)
	}
	return nil
}

func directSupported() bool { return true }

// pread fills b from off, stopping early only at end of file. With direct
// I/O a read that ends inside a block has reached the end of the file: the
// kernel could not continue at an unaligned offset anyway.
func pread(fd int, b []byte, off int64, direct bool) (int, error) {
	done := 0
	for done < len(b) {
		n, err := syscall.Pread(fd, b[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, nil
		}
		done += n
		if direct && n%BlockSize != 0 {
			return done, nil
		}
	}
	return done, nil
}

// pwrite writes all of b at off.
func pwrite(fd int, b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := syscall.Pwrite(fd, b[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, syscall.EIO
		}
		done += n
	}
	return done, nil
}
