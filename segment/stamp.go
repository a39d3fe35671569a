package segment

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/annal-db/annal/eventid"
)

// FileIdentity is what the file system says of a file that no process
// can set back once it changed: its device and inode, its size, and its
// change and modification times (nanoseconds). A write, a truncation, a
// rename over it, a new link to it or a restored copy all give another
// identity: a change time can be set only by changing the clock.
type FileIdentity struct {
	Dev, Ino     uint64
	Size         int64
	Ctime, Mtime int64
}

// valid reports whether the identity was read (a file system without
// inodes and change times, such as vfs.MemFS, gives none).
func (f FileIdentity) valid() bool { return f.Ino != 0 && f.Ctime != 0 }

// Stamp says that a sealed segment was verified whole (every record:
// frame CRC, ledger, event checksum, chain, order) while its file had the
// identity File, and what it held: the head its header continues from
// (Prev, without a location) and its last record (Last). A Log never
// writes a sealed segment again, so an Open given the stamp of a segment
// whose file still has that identity need not read it again
// (Options.Stamps). A stamp is a cache of a verification, not evidence:
// whoever can write the data directory can write the stamps too; a full
// verification (Log.Verify) reads every record whatever the stamps say.
type Stamp struct {
	Segment uint64
	File    FileIdentity
	Prev    Head
	Last    Head
}

// matches reports whether the stamp is of segment s as Open read it.
func (st Stamp) matches(s *segmentFile) bool {
	return st.Segment == s.number && s.ident.valid() && st.File == s.ident &&
		st.Prev.ID == s.hdr.prevID && st.Prev.Seq == s.hdr.prevSeq && st.Last.Seq > st.Prev.Seq &&
		st.Last.Loc.Segment == s.number && st.Last.Loc.End() <= s.size
}

// stampsHeader is the first line of a stamps file (MarshalStamps).
const stampsHeader = "annal sealed segments v1"

// MarshalStamps returns the text of a stamps file: a header line, then a
// line per stamp (segment number, device, inode, size, change and
// modification times, the header's head, the last record's head and
// location).
func MarshalStamps(stamps []Stamp) []byte {
	var b strings.Builder
	b.WriteString(stampsHeader + "\n")
	for _, s := range stamps {
		fmt.Fprintf(&b, "%d %d %d %d %d %d %d %s %d %s %d %d\n", s.Segment, s.File.Dev, s.File.Ino, s.File.Size, s.File.Ctime, s.File.Mtime,
			s.Prev.Seq, s.Prev.ID, s.Last.Seq, s.Last.ID, s.Last.Loc.Offset, s.Last.Loc.Size)
	}
	return []byte(b.String())
}

// UnmarshalStamps parses the text of MarshalStamps. A file that is not
// one gives an error; the caller then verifies every segment (stamps only
// spare work).
func UnmarshalStamps(text []byte) ([]Stamp, error) {
	lines := strings.Split(string(text), "\n")
	if len(lines) < 2 || lines[0] != stampsHeader || lines[len(lines)-1] != "" {
		return nil, fmt.Errorf("segment: not a stamps file (first line %.40q)", lines[0])
	}
	var out []Stamp
	for i, line := range lines[1 : len(lines)-1] {
		f := strings.Split(line, " ")
		bad := func(what string) error {
			return fmt.Errorf("segment: stamps file line %d: %s: %.120q", i+2, what, line)
		}
		if len(f) != 12 {
			return nil, bad("not 12 fields")
		}
		var n [10]int64
		for j, k := range []int{0, 1, 2, 3, 4, 5, 6, 8, 10, 11} {
			v, err := strconv.ParseInt(f[k], 10, 64)
			if err != nil || v < 0 {
				return nil, bad("field " + strconv.Itoa(k+1) + " is not a number")
			}
			n[j] = v
		}
		prev, err := eventid.Parse(f[7])
		if err != nil {
			return nil, bad("bad ID")
		}
		last, err := eventid.Parse(f[9])
		if err != nil {
			return nil, bad("bad ID")
		}
		out = append(out, Stamp{Segment: uint64(n[0]),
			File: FileIdentity{Dev: uint64(n[1]), Ino: uint64(n[2]), Size: n[3], Ctime: n[4], Mtime: n[5]},
			Prev: Head{ID: prev, Seq: uint64(n[6])},
			Last: Head{ID: last, Seq: uint64(n[7]), Loc: Location{Segment: uint64(n[0]), Offset: n[8], Size: n[9]}}})
	}
	return out, nil
}
