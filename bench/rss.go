package bench

import (
	"os"
	"strconv"
	"strings"
)

// RSS returns the process's resident set size in bytes, from
// /proc/self/statm (0 where there is none): the soak and growth commands
// report it over time.
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
