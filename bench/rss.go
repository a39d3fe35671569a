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

// RSSAnon returns the part of RSS that no file backs (the Go heap and
// stacks, Pebble's C memory), from /proc/self/statm: resident less
// shared pages. annal reads records from memory maps of its segment
// files, and the pages those reads touch count in RSS but are the page
// cache's, which the kernel takes back under pressure; RSSAnon leaves
// them out, so that memory the process holds can be told from them.
func RSSAnon() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	resident, _ := strconv.ParseInt(f[1], 10, 64)
	shared, _ := strconv.ParseInt(f[2], 10, 64)
	return (resident - shared) * int64(os.Getpagesize())
}
