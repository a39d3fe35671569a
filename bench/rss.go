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
	resident, _ := statm()
	return resident
}

// RSSAnon returns the part of RSS that no file backs (the Go heap and
// stacks, Pebble's C memory), from /proc/self/statm: resident less
// shared pages. annal reads records from memory maps of its segment
// files, and the pages those reads touch count in RSS but are the page
// cache's, which the kernel takes back under pressure; RSSAnon leaves
// them out, so that memory the process holds can be told from them.
func RSSAnon() int64 {
	resident, shared := statm()
	return resident - shared
}

// statm returns the resident and the shared (file-backed) bytes of the
// process from /proc/self/statm, or zeros where there is none.
func statm() (resident, shared int64) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0
	}
	page := int64(os.Getpagesize())
	r, _ := strconv.ParseInt(f[1], 10, 64)
	sh, _ := strconv.ParseInt(f[2], 10, 64)
	return r * page, sh * page
}
