package flash

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcIO holds the kernel's per-process I/O counters from /proc/self/io.
// ReadBytes and WriteBytes count bytes that reached the block layer, which
// page-cache hits do not; they are the independent check that a "flash"
// read really was one.
type ProcIO struct {
	Rchar, Wchar, ReadBytes, WriteBytes int64
}

// ReadProcIO reads /proc/self/io. The counters cover every thread of this
// process, so a check is only exact while nothing else in it does I/O.
func ReadProcIO() (ProcIO, error) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return ProcIO{}, fmt.Errorf("flash: reading I/O counters: %w", err)
	}
	defer f.Close()
	var p ProcIO
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return ProcIO{}, fmt.Errorf("flash: /proc/self/io field %q: %w", k, err)
		}
		switch k {
		case "rchar":
			p.Rchar = n
		case "wchar":
			p.Wchar = n
		case "read_bytes":
			p.ReadBytes = n
			found++
		case "write_bytes":
			p.WriteBytes = n
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return ProcIO{}, fmt.Errorf("flash: reading /proc/self/io: %w", err)
	}
	if found != 2 {
		return ProcIO{}, fmt.Errorf("flash: /proc/self/io lacks read_bytes/write_bytes")
	}
	return p, nil
}
