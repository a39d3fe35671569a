package canon

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"
)

// MaxDepth is the deepest nesting of arrays and objects that canon accepts.
// Every '[' and '{' opens one level: `[[1]]` is nested 2 deep. A value nested
// exactly MaxDepth deep is accepted; one level more is ErrTooDeep.
const MaxDepth = 1000

// Canonicalizer canonicalizes JSON texts, keeping its scratch buffers from
// one call to the next so that, once they have grown to fit the inputs,
// Append allocates nothing. The zero value is ready to use. A Canonicalizer
// is not safe for concurrent use; the package-level functions share a pool
// of them.
type Canonicalizer struct {
	// members holds the members of the objects being read, innermost object
	// last: each object uses members[base:] and truncates back when done.
	members []member
	// keys holds the decoded text of keys whose canonical form has escapes
	// (it then differs from the decoded text, which is what keys sort by).
	keys []byte
	// order holds the sorted positions of an object's members.
	order []int32
	// tmp holds an object's members while they are rewritten in order.
	tmp []byte
	// out receives the output of Valid and Members, which discard it.
	out []byte
	// top, when recordTop is set, receives the top-level object's members
	// as spans of the input (for Members).
	top       []topMember
	recordTop bool
}

// member is one member of an object as written to the output: the canonical
// `"key":value` bytes at dst[start:end], and where the key's decoded text is.
type member struct {
	start, end int // member bytes in dst, without the separating ','
	// The decoded key is dst[keyStart:keyEnd], or keys[keyStart:keyEnd]
	// when inKeys is set.
	keyStart, keyEnd int
	inKeys           bool
	isIndex          bool   // the key is an array index: it sorts first, by index
	index            uint32 // the key's value when isIndex
	offset           int    // input offset of the key, for the duplicate-key error
	// prefix holds the first 8 bytes of the decoded key, big-endian, padded
	// with zeros, so that most comparisons are one integer comparison.
	prefix uint64
}

// topMember locates one member of the top-level object in the input: the
// key literal (quotes included) and the value.
type topMember struct {
	keyStart, keyEnd     int
	valueStart, valueEnd int
}

// pool holds Canonicalizers for the package-level functions.
var pool = sync.Pool{New: func() any { return new(Canonicalizer) }}

// maxPooledScratch bounds the scratch a pooled Canonicalizer keeps, so one
// huge input does not pin its buffers for the life of the process.
const maxPooledScratch = 1 << 20

func getCanonicalizer() *Canonicalizer { return pool.Get().(*Canonicalizer) }

func putCanonicalizer(c *Canonicalizer) {
	if cap(c.tmp) > maxPooledScratch || cap(c.out) > maxPooledScratch || cap(c.keys) > maxPooledScratch ||
		cap(c.members) > maxPooledScratch/64 || cap(c.top) > maxPooledScratch/64 || cap(c.order) > maxPooledScratch/4 {
		return
	}
	c.recordTop = false
	pool.Put(c)
}

// Append appends the canonical form of the JSON text src to dst and returns
// the extended slice. On error it returns dst unchanged in length and an
// *Error. Once dst has room for the output it allocates nothing.
func Append(dst, src []byte) ([]byte, error) {
	c := getCanonicalizer()
	dst, err := c.Append(dst, src)
	putCanonicalizer(c)
	return dst, err
}

// AppendObject is Append for a src that must be a JSON object, as event
// meta must be. If src is valid JSON of another kind the error wraps
// ErrNotObject, with the offset of the value.
func AppendObject(dst, src []byte) ([]byte, error) {
	c := getCanonicalizer()
	dst, err := c.AppendObject(dst, src)
	putCanonicalizer(c)
	return dst, err
}

// Valid reports whether src is JSON that canon accepts: it returns nil, or
// the *Error that Append would return.
func Valid(src []byte) error {
	c := getCanonicalizer()
	var err error
	c.out, err = c.Append(c.out[:0], src)
	putCanonicalizer(c)
	return err
}

// Append is the package-level Append using c's scratch buffers.
func (c *Canonicalizer) Append(dst, src []byte) ([]byte, error) {
	n := len(dst)
	dst, err := c.appendText(dst, src)
	if err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// AppendObject is the package-level AppendObject using c's scratch buffers.
func (c *Canonicalizer) AppendObject(dst, src []byte) ([]byte, error) {
	n := len(dst)
	dst, err := c.appendText(dst, src)
	if err != nil {
		return dst[:n], err
	}
	if dst[n] != '{' {
		return dst[:n], newError(ErrNotObject, skipSpace(src, 0), "JSON value is not an object")
	}
	return dst, nil
}

// appendText canonicalizes the whole text src: one value, with optional
// whitespace around it.
func (c *Canonicalizer) appendText(dst, src []byte) ([]byte, error) {
	if !c.recordTop && IsCanonical(src) {
		// Already canonical, as most producers' compact JSON with sorted
		// keys is: a byte scan confirms it (ScanCanonical guarantees that
		// the rest of this function would write src unchanged, and fail
		// on nothing), and src is copied as it is.
		return append(dst, src...), nil
	}
	c.members = c.members[:0]
	c.keys = c.keys[:0]
	c.top = c.top[:0]
	i := skipSpace(src, 0)
	depth := 0
	if c.recordTop && i < len(src) && src[i] == '{' {
		// Members: the object is a container of values that are used on
		// their own (an NDJSON line holds an event's meta and data), so
		// it takes no level of their depth allowance.
		depth = -1
	}
	dst, i, err := c.value(dst, src, i, depth)
	if err != nil {
		return dst, err
	}
	if i = skipSpace(src, i); i != len(src) {
		return dst, trailing(src, i)
	}
	return dst, nil
}

func trailing(src []byte, i int) *Error {
	desc, bad := describeAt(src, i)
	if bad {
		return newError(ErrInvalidUTF8, i, "invalid UTF-8 "+desc+" after the JSON value")
	}
	return newError(ErrTrailingData, i, "trailing data "+desc+" after the JSON value")
}

// space[b] is true for the four whitespace bytes of RFC 8259.
var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

func skipSpace(src []byte, i int) int {
	for i < len(src) && space[src[i]] {
		i++
	}
	return i
}

// value canonicalizes the value that starts at src[i] (after whitespace),
// which is inside depth arrays and objects.
func (c *Canonicalizer) value(dst, src []byte, i, depth int) ([]byte, int, error) {
	if i >= len(src) {
		return dst, i, unexpected(src, i, "a JSON value")
	}
	switch b := src[i]; b {
	case '"':
		dst, i, _, err := appendString(dst, src, i)
		return dst, i, err
	case '{':
		return c.object(dst, src, i, depth+1)
	case '[':
		return c.array(dst, src, i, depth+1)
	case 't':
		return literal(dst, src, i, "true")
	case 'f':
		return literal(dst, src, i, "false")
	case 'n':
		return literal(dst, src, i, "null")
	default:
		if b == '-' || b >= '0' && b <= '9' {
			return appendNumber(dst, src, i)
		}
		return dst, i, unexpected(src, i, "a JSON value")
	}
}

func literal(dst, src []byte, i int, lit string) ([]byte, int, error) {
	for j := 0; j < len(lit); j++ {
		if i+j >= len(src) || src[i+j] != lit[j] {
			return dst, i, unexpected(src, i+j, "'"+lit[j:j+1]+"' of "+lit)
		}
	}
	return append(dst, lit...), i + len(lit), nil
}

func (c *Canonicalizer) array(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > MaxDepth {
		return dst, i, newError(ErrTooDeep, i, "array nested deeper than MaxDepth (1000)")
	}
	dst = append(dst, '[')
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	for {
		var err error
		dst, i, err = c.value(dst, src, i, depth)
		if err != nil {
			return dst, i, err
		}
		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, i, unexpected(src, i, "',' or ']' after array element")
		}
		switch src[i] {
		case ',':
			dst = append(dst, ',')
			i = skipSpace(src, i+1)
		case ']':
			return append(dst, ']'), i + 1, nil
		default:
			return dst, i, unexpected(src, i, "',' or ']' after array element")
		}
	}
}

func (c *Canonicalizer) object(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > MaxDepth {
		return dst, i, newError(ErrTooDeep, i, "object nested deeper than MaxDepth (1000)")
	}
	open := len(dst)
	dst = append(dst, '{')
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == '}' {
		return append(dst, '}'), i + 1, nil
	}
	base, keysBase := len(c.members), len(c.keys)
	inOrder := true
	for {
		if i >= len(src) || src[i] != '"' {
			return dst, i, unexpected(src, i, "'\"' to start an object key")
		}
		if len(c.members) > base {
			dst = append(dst, ',')
		}
		m := member{start: len(dst), offset: i}
		keyLit := i
		var escaped bool
		var err error
		dst, i, escaped, err = appendString(dst, src, i)
		if err != nil {
			return dst, i, err
		}
		keyLitEnd := i
		if escaped {
			// The canonical key has escapes; sort by the decoded text.
			m.inKeys = true
			m.keyStart = len(c.keys)
			c.keys, _, _ = appendUnquoted(c.keys, src, keyLit)
			m.keyEnd = len(c.keys)
		} else {
			m.keyStart, m.keyEnd = m.start+1, len(dst)-1
		}
		key := c.key(dst, &m)
		m.index, m.isIndex = arrayIndex(key)
		m.prefix = keyPrefix(key)

		i = skipSpace(src, i)
		if i >= len(src) || src[i] != ':' {
			return dst, i, unexpected(src, i, "':' after object key")
		}
		dst = append(dst, ':')
		i = skipSpace(src, i+1)
		valueStart := i
		dst, i, err = c.value(dst, src, i, depth)
		if err != nil {
			return dst, i, err
		}
		m.end = len(dst)
		if c.recordTop && depth == 0 {
			c.top = append(c.top, topMember{
				keyStart: keyLit, keyEnd: keyLitEnd, valueStart: valueStart, valueEnd: i,
			})
		}

		if inOrder && len(c.members) > base {
			switch cmp := c.compare(dst, &c.members[len(c.members)-1], &m); {
			case cmp == 0:
				return dst, m.offset, duplicate(dst, c, &m)
			case cmp > 0:
				inOrder = false
			}
		}
		c.members = append(c.members, m)

		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, i, unexpected(src, i, "',' or '}' after object member")
		}
		if src[i] == '}' {
			i++
			break
		}
		if src[i] != ',' {
			return dst, i, unexpected(src, i, "',' or '}' after object member")
		}
		i = skipSpace(src, i+1)
	}

	members := c.members[base:]
	if !inOrder {
		var err error
		if dst, err = c.reorder(dst, open, members); err != nil {
			return dst, i, err
		}
	}
	c.members = c.members[:base]
	c.keys = c.keys[:keysBase]
	return append(dst, '}'), i, nil
}

// reorder sorts the members of the object that opens at dst[open] and
// rewrites them in that order. Keys that compare equal are duplicates;
// the one reported is the first a reader meets in the input.
//
// Rewriting copies the object's body twice (out to tmp and back), and a body
// is copied again by every enclosing object that is not in order either, so
// the work is bounded by the input size times the nesting depth. Objects
// already in order, the common case, cost nothing here.
func (c *Canonicalizer) reorder(dst []byte, open int, members []member) ([]byte, error) {
	// Sort positions rather than the members themselves: cheaper to move.
	c.order = c.order[:0]
	for j := range members {
		c.order = append(c.order, int32(j))
	}
	order := c.order
	// Equal keys keep input order (positions are in input order), so the
	// comparison is a total order and any sort gives the same result.
	less := func(a, b int32) bool {
		r := c.compare(dst, &members[a], &members[b])
		return r < 0 || r == 0 && a < b
	}
	if len(order) <= 16 {
		for j := 1; j < len(order); j++ {
			for k := j; k > 0 && less(order[k], order[k-1]); k-- {
				order[k], order[k-1] = order[k-1], order[k]
			}
		}
	} else {
		slices.SortFunc(order, func(a, b int32) int {
			if less(a, b) {
				return -1
			}
			return 1 // never equal: positions differ
		})
	}
	// Equal keys now sit together in input order; the second of each pair
	// is a duplicate, and the one at the smallest offset is reported.
	var dup *member
	for j := 1; j < len(order); j++ {
		m := &members[order[j]]
		prev := &members[order[j-1]]
		if prev.prefix == m.prefix && c.compare(dst, prev, m) == 0 && (dup == nil || m.offset < dup.offset) {
			dup = m
		}
	}
	if dup != nil {
		return dst, duplicate(dst, c, dup)
	}
	body := open + 1
	c.tmp = append(c.tmp[:0], dst[body:]...)
	dst = dst[:body]
	for j, o := range order {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, c.tmp[members[o].start-body:members[o].end-body]...)
	}
	return dst, nil
}

func duplicate(dst []byte, c *Canonicalizer, m *member) *Error {
	return newError(ErrDuplicateKey, m.offset, "duplicate key "+string(AppendString(nil, string(c.key(dst, m)))))
}

// key returns the decoded text of m's key.
func (c *Canonicalizer) key(dst []byte, m *member) []byte {
	if m.inKeys {
		return c.keys[m.keyStart:m.keyEnd]
	}
	return dst[m.keyStart:m.keyEnd]
}

// compare orders keys as a JavaScript object orders its own keys after they
// were inserted in Array.prototype.sort() order: array indices first, in
// numeric order, then the other keys by UTF-16 code units.
func (c *Canonicalizer) compare(dst []byte, a, b *member) int {
	switch {
	case a.isIndex && b.isIndex:
		return cmpUint32(a.index, b.index)
	case a.isIndex:
		return -1
	case b.isIndex:
		return 1
	}
	if a.prefix != b.prefix {
		// The first differing byte is within the prefixes.
		shift := 56 - bits.LeadingZeros64(a.prefix^b.prefix)&^7
		return compareFirstDiff(byte(a.prefix>>shift), byte(b.prefix>>shift))
	}
	return compareUTF16(c.key(dst, a), c.key(dst, b))
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units,
// the order of JavaScript's default sort.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	p := 0
	for p < n && a[p] == b[p] {
		p++
	}
	if p == n {
		return len(a) - len(b) // one is a prefix of the other
	}
	return compareFirstDiff(a[p], b[p])
}

// compareFirstDiff orders two valid UTF-8 strings by UTF-16 code units,
// given the first byte in which they differ (0 standing for the end of the
// shorter one). In valid UTF-8 both bytes then start a character, or both
// continue characters that start alike, so UTF-8 byte order is code point
// order. UTF-16 order is the same except for one pair of ranges: a
// character from U+10000 up (lead byte F0-F4; a surrogate pair D800-DBFF
// DC00-DFFF in UTF-16) sorts before one in U+E000..U+FFFF (lead byte EE or
// EF). Continuation bytes (80-BF) never fall in either range.
func compareFirstDiff(x, y byte) int {
	if x >= 0xee && y >= 0xee && (x >= 0xf0) != (y >= 0xf0) {
		return int(y) - int(x)
	}
	return int(x) - int(y)
}

// keyPrefix returns the first 8 bytes of key as a big-endian number, padded
// with zero bytes. Where two prefixes first differ, either both keys have
// differing bytes there, or the shorter key ended there (its padding 0
// against a byte of the longer key that is not 0), so it sorts first.
func keyPrefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var p uint64
	for j, b := range key {
		p |= uint64(b) << (56 - 8*j)
	}
	return p
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// arrayIndex reports whether key is an array index in JavaScript's sense:
// the canonical decimal form of an integer 0 .. 2^32-2. Such keys are
// ordered before all others, by value.
func arrayIndex(key []byte) (uint32, bool) {
	if len(key) == 0 || len(key) > 10 || (key[0] == '0' && len(key) > 1) {
		return 0, false
	}
	var v uint64
	for _, b := range key {
		if b < '0' || b > '9' {
			return 0, false
		}
		v = v*10 + uint64(b-'0')
	}
	if v > 1<<32-2 {
		return 0, false
	}
	return uint32(v), true
}
